package retry

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/ingestq/ingestq/shared/config"
)

// Register defines the settings of one retry policy on r, all in one shape:
// -<name>-attempts, -<name>-backoff, -<name>-backoff-max and -<name>-jitter,
// read from INGESTQ_<NAME>_ATTEMPTS, _BACKOFF, _BACKOFF_MAX and _JITTER.
// what names the operation in the help ("a file is fetched").
// The returned policy holds def until r.Parse fills it in, which refuses a
// policy that Validate refuses, naming the variables.
func Register(r *config.Registry, name, what string, def Policy) *Policy {
	if err := def.Validate(); err != nil || def.Attempts < 1 {
		panic(fmt.Sprintf("retry: default policy of %s: %v (attempts %d)", name, err, def.Attempts))
	}
	env := "INGESTQ_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
	p := &Policy{}
	r.Func(name+"-attempts", env+"_ATTEMPTS", strconv.Itoa(def.Attempts),
		"how many times "+what+" in all (only failures that may pass are tried again)", config.SetPositiveInt(&p.Attempts))
	r.Func(name+"-backoff", env+"_BACKOFF", def.Backoff.String(),
		"wait after the first failed attempt, doubled after each further one", config.SetNonNegativeDuration(&p.Backoff))
	r.Func(name+"-backoff-max", env+"_BACKOFF_MAX", def.Max.String(),
		"longest wait between two attempts (0s: no limit)", config.SetNonNegativeDuration(&p.Max))
	r.Func(name+"-jitter", env+"_JITTER", strconv.FormatFloat(def.Jitter, 'g', -1, 64),
		"share of each wait drawn at random, 0 to 1 (0.5: between half the wait and all of it)", setJitter(&p.Jitter))
	r.Check(func() error {
		if err := p.Validate(); err != nil {
			return fmt.Errorf("%s_ATTEMPTS, _BACKOFF, _BACKOFF_MAX and _JITTER: %w", env, err)
		}
		return nil
	})
	return p
}

// RetriesToAttempts converts the value of a setting that counted the
// retries after a first attempt into a count of attempts, for a renamed
// setting's old variable (config.Registry.Renamed).
func RetriesToAttempts(s string) (string, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 0 {
		return "", fmt.Errorf("not a count of retries: %q", s)
	}
	return strconv.Itoa(n + 1), nil
}

func setJitter(p *float64) func(string) error {
	return func(s string) error {
		v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || !(v >= 0 && v <= 1) {
			return fmt.Errorf("%q: want a number from 0 to 1", s)
		}
		*p = v
		return nil
	}
}
