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
	// setters parse a value of each setting, by flag name.
	setters map[string]func(string) error
	// renamed maps a deprecated flag to the flag of its new name.
	renamed map[string]string
	// deprecated says which deprecated variables the environment sets.
	deprecated []string
}

// New returns a Registry that defines its settings on flags and reads
// their environment variables through lookupEnv.
func New(flags *flag.FlagSet, lookupEnv LookupEnv) *Registry {
	return &Registry{flags: flags, lookupEnv: lookupEnv, envErrs: map[string]error{},
		setters: map[string]func(string) error{}, renamed: map[string]string{}}
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
	r.setters[flagName] = set
	r.vars = append(r.vars, Variable{Flag: flagName, Env: envName, Default: def, Help: help})
}

// Renamed keeps the old flag and variable of a renamed setting working:
// the old variable applies when the new one is unset (both set is an
// error), the old flag as the new flag does. convert turns an old value
// into a new one (nil: the value is the same). The old names are left out
// of the table; Deprecated lists those the environment sets.
func (r *Registry) Renamed(oldFlag, oldEnv, newFlag string, convert func(string) (string, error)) {
	set, ok := r.setters[newFlag]
	if !ok {
		panic(fmt.Sprintf("config: %s renamed to undefined setting -%s", oldEnv, newFlag))
	}
	newEnv := ""
	for _, v := range r.vars {
		if v.Flag == newFlag {
			newEnv = v.Env
		}
	}
	setOld := func(s string) error {
		if convert != nil {
			var err error
			if s, err = convert(s); err != nil {
				return err
			}
		}
		return set(s)
	}
	if v, ok := r.lookupEnv(oldEnv); ok {
		r.deprecated = append(r.deprecated, fmt.Sprintf("%s is deprecated: set %s", oldEnv, newEnv))
		if _, both := r.lookupEnv(newEnv); both {
			r.envErrs[newFlag] = fmt.Errorf("%s and %s are both set: %s is the old name, set only %s", newEnv, oldEnv, oldEnv, newEnv)
		} else if err := setOld(v); err != nil {
			r.envErrs[newFlag] = fmt.Errorf("%s: %w", oldEnv, err)
		}
	}
	r.flags.Func(oldFlag, fmt.Sprintf("deprecated: use -%s (env %s)", newFlag, newEnv), setOld)
	r.renamed[oldFlag] = newFlag
}

// Deprecated lists the deprecated variables the environment sets, each
// with the name to set instead, for the service to log.
func (r *Registry) Deprecated() []string {
	return append([]string(nil), r.deprecated...)
}

// Check adds a rule that Parse applies after every value is read, for
// rules that span several settings.
func (r *Registry) Check(rule func() error) {
	r.checks = append(r.checks, rule)
}

// Parse reads the flags from args. It reports every bad environment value
// that no flag overrode, and every broken rule, naming the variable.
func (r *Registry) Parse(args []string) error {
	if err := r.flags.Parse(args); err != nil {
		return err
	}
	r.flags.Visit(func(f *flag.Flag) {
		delete(r.envErrs, f.Name)
		if to, ok := r.renamed[f.Name]; ok {
			delete(r.envErrs, to)
		}
	})
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
