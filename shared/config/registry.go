// Package config reads a service's configuration from command-line flags and
// environment variables. Every setting has both: the environment gives the
// default (so containers and systemd units configure a service without
// arguments), a flag overrides it (so an operator can try a change by hand).
//
// A Registry defines settings on a flag.FlagSet and remembers each one
// (flag, variable, default, help), so that a service can print the table of
// everything it reads (see WriteMarkdownTable).
package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// Variable describes one setting.
type Variable struct {
	Flag    string // flag name without the dash, e.g. "zk-servers"
	Env     string // environment variable, e.g. "INGESTQ_ZK_SERVERS"
	Default string // built-in default as text, before the environment applies
	Help    string
}

// LookupEnv finds an environment variable; os.LookupEnv in production.
type LookupEnv func(name string) (value string, ok bool)

// Registry defines settings on a FlagSet, reading their defaults from the
// environment.
type Registry struct {
	flags     *flag.FlagSet
	lookupEnv LookupEnv
	vars      []Variable
	// envErrs holds bad environment values by flag name; one is reported
	// only when its flag does not override it.
	envErrs map[string]error
	// checks run after parsing, for rules that span several settings.
	checks []func() error
}

// New returns a Registry that defines its settings on flags and reads
// their environment variables through lookupEnv.
func New(flags *flag.FlagSet, lookupEnv LookupEnv) *Registry {
	return &Registry{flags: flags, lookupEnv: lookupEnv, envErrs: map[string]error{}}
}

// String defines a text setting.
func (r *Registry) String(flagName, envName, def, help string) *string {
	p := new(string)
	r.Func(flagName, envName, def, help, setString(p))
	return p
}

// Int defines an integer setting.
func (r *Registry) Int(flagName, envName string, def int, help string) *int {
	p := new(int)
	r.Func(flagName, envName, strconv.Itoa(def), help, setInt(p))
	return p
}

// Bool defines a true/false setting.
func (r *Registry) Bool(flagName, envName string, def bool, help string) *bool {
	p := new(bool)
	r.Func(flagName, envName, strconv.FormatBool(def), help, setBool(p))
	return p
}

// Duration defines a duration setting ("30s", "1m30s").
func (r *Registry) Duration(flagName, envName string, def time.Duration, help string) *time.Duration {
	p := new(time.Duration)
	r.Func(flagName, envName, def.String(), help, setDuration(p))
	return p
}

func setString(p *string) func(string) error {
	return func(s string) error {
		*p = s
		return nil
	}
}

func setInt(p *int) func(string) error {
	return func(s string) error {
		v, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("not an integer: %q", s)
		}
		*p = v
		return nil
	}
}

func setBool(p *bool) func(string) error {
	return func(s string) error {
		v, err := strconv.ParseBool(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("not a boolean (want true or false): %q", s)
		}
		*p = v
		return nil
	}
}

func setDuration(p *time.Duration) func(string) error {
	return func(s string) error {
		v, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("not a duration (want e.g. 10s, 1m30s): %q", s)
		}
		*p = v
		return nil
	}
}

// Func defines a setting of any type: set parses a value and stores it. It
// is called with the default, then with the environment's value if the
// variable is set, then with the flag's value if the flag is given.
func (r *Registry) Func(flagName, envName, def, help string, set func(string) error) {
	if err := set(def); err != nil {
		// A default that does not parse is a programming error.
		panic(fmt.Sprintf("config: default %q of %s: %v", def, envName, err))
	}
	if v, ok := r.lookupEnv(envName); ok {
		if err := set(v); err != nil {
			r.envErrs[flagName] = fmt.Errorf("%s: %w", envName, err)
		}
	}
	usage := fmt.Sprintf("%s (env %s, default %q)", help, envName, def)
	r.flags.Func(flagName, usage, set)
	r.vars = append(r.vars, Variable{Flag: flagName, Env: envName, Default: def, Help: help})
}

// check adds a rule that Parse applies after every value is read.
func (r *Registry) check(rule func() error) {
	r.checks = append(r.checks, rule)
}

// Parse reads the flags from args. It reports every bad environment value
// that no flag overrode, and every broken rule, naming the variable.
func (r *Registry) Parse(args []string) error {
	if err := r.flags.Parse(args); err != nil {
		return err
	}
	r.flags.Visit(func(f *flag.Flag) { delete(r.envErrs, f.Name) })
	var errs []error
	for _, v := range r.vars {
		if err, ok := r.envErrs[v.Flag]; ok {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		// Rules would only repeat the consequences of a bad value.
		return errors.Join(errs...)
	}
	for _, rule := range r.checks {
		errs = append(errs, rule())
	}
	return errors.Join(errs...)
}

// Variables lists the settings in the order they were defined.
func (r *Registry) Variables() []Variable {
	return append([]Variable(nil), r.vars...)
}

// WriteMarkdownTable writes the settings as a Markdown table (make
// config-table gathers every service's into docs/configuration.md).
func (r *Registry) WriteMarkdownTable(w io.Writer) error {
	var b strings.Builder
	b.WriteString("| Variable | Flag | Default | Meaning |\n|---|---|---|---|\n")
	for _, v := range r.vars {
		def := "(empty)"
		if v.Default != "" {
			def = "`" + v.Default + "`"
		}
		fmt.Fprintf(&b, "| `%s` | `-%s` | %s | %s |\n", v.Env, v.Flag, def, strings.ReplaceAll(v.Help, "|", `\|`))
	}
	_, err := io.WriteString(w, b.String())
	return err
}
