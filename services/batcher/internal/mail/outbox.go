package mail

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Outbox writes each message as <dir>/<key>.eml.
type Outbox struct {
	Dir  string
	From string
}

// Path is where the message with key lands.
func (o *Outbox) Path(key string) string { return filepath.Join(o.Dir, key+".eml") }

// Send writes the message atomically (a temporary file renamed into place),
// replacing an earlier message with the same key.
func (o *Outbox) Send(ctx context.Context, m Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	data, err := Compose(m, o.From, time.Now())
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.Dir, 0o750); err != nil {
		return fmt.Errorf("creating outbox: %w", err)
	}
	tmp, err := os.CreateTemp(o.Dir, "."+m.Key+"-*.tmp")
	if err != nil {
		return fmt.Errorf("writing %s to the outbox: %w", m.Key, err)
	}
	_, werr := tmp.Write(data)
	if werr == nil {
		werr = tmp.Sync()
	}
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Chmod(tmp.Name(), 0o640)
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), o.Path(m.Key))
	}
	if werr != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("writing %s to the outbox: %w", m.Key, werr)
	}
	return nil
}
