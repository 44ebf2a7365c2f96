package config

import (
	"errors"
	"fmt"
	"path/filepath"
)

// RegisterWorkRoot defines the work root every stage shares
// (-work-root, INGESTQ_WORK_ROOT). Parse makes it absolute and clean, so
// each service reads it the same way and a job's working_dir, written by
// the batcher under it, is found inside it by every stage.
func RegisterWorkRoot(r *Registry) *string {
	p := new(string)
	r.Func("work-root", "INGESTQ_WORK_ROOT", "/var/lib/ingestq/work",
		"working storage every stage shares; a job works in <root>/<bid>/<job>", setWorkRoot(p))
	return p
}

func setWorkRoot(p *string) func(string) error {
	return func(s string) error {
		if s == "" {
			return errors.New("must name a directory")
		}
		abs, err := filepath.Abs(s)
		if err != nil {
			return fmt.Errorf("%q: %w", s, err)
		}
		*p = abs // filepath.Abs cleans it
		return nil
	}
}
