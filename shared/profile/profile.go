// Package profile reads collection profiles: a directory of YAML files, one
// profile each, that say which collection a submission goes to, who owns
// it, who is told about it and how urgent it is.
//
//	name: demo
//	collection: demo
//	owner: ark:/99999/fk4owner
//	notification_addresses: [depositor@example.org]
//	notify_on_queue: true
package profile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/mail"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode"

	"gopkg.in/yaml.v3"
)

// Profile is one collection profile.
type Profile struct {
	Name                  string   `yaml:"name"`       // the key submissions name it by
	Collection            string   `yaml:"collection"` // mnemonic
	Owner                 string   `yaml:"owner"`      // binds local ids; default Collection
	NotificationAddresses []string `yaml:"notification_addresses"`
	CallbackURL           string   `yaml:"callback_url"`
	Priority              int      `yaml:"priority"` // 0..99, lower first; default 5
	NotifyOnQueue         bool     `yaml:"notify_on_queue"`
	StorageTarget         string   `yaml:"storage_target"` // default "local"
}

// Defaults of the optional keys.
const (
	DefaultPriority      = 5
	DefaultStorageTarget = "local"
	// MaxFileBytes bounds one profile file: profiles are a few lines.
	MaxFileBytes = 1 << 20
	// maxNameLen bounds names and mnemonics.
	maxNameLen = 128
)

// Set is the profiles of one directory, by name. It does not change once
// loaded and is safe for concurrent use.
type Set struct {
	byName map[string]*Profile
	names  []string // sorted
}

// Get returns a copy of the profile called name.
func (s *Set) Get(name string) (*Profile, bool) {
	p, ok := s.byName[name]
	if !ok {
		return nil, false
	}
	c := *p
	c.NotificationAddresses = slices.Clone(p.NotificationAddresses)
	return &c, true
}

// Names returns the profile names, sorted.
func (s *Set) Names() []string { return slices.Clone(s.names) }

// Load reads every *.yaml and *.yml file of dir (not its subdirectories;
// hidden files skipped). Every problem of every file is reported, each
// naming its file (and line and key where it has one); two files with the
// same profile name are an error, and so is a directory without profiles.
func Load(dir string) (*Set, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("profiles: %w", err)
	}
	set := &Set{byName: map[string]*Profile{}}
	from := map[string]string{} // profile name → file
	var errs []error
	for _, e := range entries {
		name := e.Name()
		ext := strings.ToLower(filepath.Ext(name))
		if e.IsDir() || strings.HasPrefix(name, ".") || (ext != ".yaml" && ext != ".yml") {
			continue
		}
		path := filepath.Join(dir, name)
		p, err := readFile(path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if first, dup := from[p.Name]; dup {
			errs = append(errs, fmt.Errorf("%s: name: profile %q is already defined in %s", path, p.Name, first))
			continue
		}
		from[p.Name] = path
		set.byName[p.Name] = p
		set.names = append(set.names, p.Name)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if len(set.names) == 0 {
		return nil, fmt.Errorf("profiles: %s has no *.yaml or *.yml profile", dir)
	}
	slices.Sort(set.names)
	return set, nil
}

func readFile(path string) (*Profile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("profiles: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, MaxFileBytes)
	}
	return Parse(path, data)
}

// Parse decodes and checks one profile; source names it in errors (a file
// name). Errors say which key is wrong and why.
func Parse(source string, data []byte) (*Profile, error) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: empty profile", source)
		}
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	var more yaml.Node
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: one profile per file: a second YAML document follows", source)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s: line %d: a profile is a mapping of keys to values", source, root.Line)
	}
	p := &Profile{Priority: DefaultPriority}
	seen := map[string]int{} // key → line
	for i := 0; i+1 < len(root.Content); i += 2 {
		key, value := root.Content[i], root.Content[i+1]
		if line, dup := seen[key.Value]; dup {
			return nil, fmt.Errorf("%s: line %d: %s: repeats the key of line %d", source, key.Line, key.Value, line)
		}
		seen[key.Value] = key.Line
		if err := p.set(key, value); err != nil {
			return nil, fmt.Errorf("%s: line %d: %w", source, key.Line, err)
		}
	}
	if err := p.check(); err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	return p, nil
}

// keys are the keys a profile may have.
func keys() []string {
	return []string{"name", "collection", "owner", "notification_addresses", "callback_url", "priority", "notify_on_queue", "storage_target"}
}

// set decodes one key's value into p.
func (p *Profile) set(key, value *yaml.Node) error {
	if key.Kind != yaml.ScalarNode {
		return fmt.Errorf("keys are names, not %s", kindName(key))
	}
	var target any
	switch key.Value {
	case "name":
		target = &p.Name
	case "collection":
		target = &p.Collection
	case "owner":
		target = &p.Owner
	case "notification_addresses":
		target = &p.NotificationAddresses
	case "callback_url":
		target = &p.CallbackURL
	case "priority":
		target = &p.Priority
	case "notify_on_queue":
		target = &p.NotifyOnQueue
	case "storage_target":
		target = &p.StorageTarget
	default:
		return fmt.Errorf("unknown key %q (known: %s)", key.Value, strings.Join(keys(), ", "))
	}
	if key.Value == "notification_addresses" && value.Kind != yaml.SequenceNode && value.ShortTag() != "!!null" {
		return fmt.Errorf("%s: want a list of addresses, e.g. [depositor@example.org], not %s", key.Value, kindName(value))
	}
	if err := value.Decode(target); err != nil {
		return fmt.Errorf("%s: %s", key.Value, decodeReason(err, value))
	}
	return nil
}

// decodeReason turns yaml's "cannot unmarshal !!str `x` into int" into a
// short reason.
func decodeReason(err error, value *yaml.Node) string {
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msg := te.Errors[0]
		if _, after, ok := strings.Cut(msg, ": "); ok && strings.HasPrefix(msg, "line ") {
			msg = after
		}
		return msg
	}
	if value.Kind != yaml.ScalarNode {
		return fmt.Sprintf("unexpected %s", kindName(value))
	}
	return err.Error()
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	return "a " + n.ShortTag() + " value"
}

// check validates the decoded profile and fills the defaults.
func (p *Profile) check() error {
	if err := checkMnemonic("name", p.Name); err != nil {
		return err
	}
	if err := checkMnemonic("collection", p.Collection); err != nil {
		return err
	}
	if p.Owner == "" {
		p.Owner = p.Collection
	}
	if err := checkToken("owner", p.Owner); err != nil {
		return err
	}
	for i, a := range p.NotificationAddresses {
		if err := checkAddress(a); err != nil {
			return fmt.Errorf("notification_addresses[%d]: %w", i, err)
		}
	}
	if p.CallbackURL != "" {
		if err := checkCallback(p.CallbackURL); err != nil {
			return fmt.Errorf("callback_url: %w", err)
		}
	}
	if p.Priority < 0 || p.Priority > 99 {
		return fmt.Errorf("priority: %d is outside 0..99", p.Priority)
	}
	if p.StorageTarget == "" {
		p.StorageTarget = DefaultStorageTarget
	}
	return checkToken("storage_target", p.StorageTarget)
}

// checkMnemonic accepts 1..128 letters, digits, '_' and '-'.
func checkMnemonic(key, v string) error {
	if v == "" {
		return fmt.Errorf("%s: required", key)
	}
	if len(v) > maxNameLen {
		return fmt.Errorf("%s: longer than %d characters", key, maxNameLen)
	}
	for _, r := range v {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return fmt.Errorf("%s: %q may hold only letters, digits, '_' and '-'", key, v)
		}
	}
	return nil
}

// checkToken accepts a value without spaces or control characters (an ARK,
// a storage node name).
func checkToken(key, v string) error {
	if len(v) > 1024 {
		return fmt.Errorf("%s: longer than 1024 characters", key)
	}
	if strings.IndexFunc(v, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) || r == unicode.ReplacementChar }) >= 0 {
		return fmt.Errorf("%s: %q has spaces, control characters or invalid UTF-8", key, v)
	}
	return nil
}

// checkAddress accepts one RFC 5322 address ("a@example.org" or
// "Name <a@example.org>"), without control characters that could inject
// mail headers.
func checkAddress(a string) error {
	if strings.IndexFunc(a, unicode.IsControl) >= 0 {
		return fmt.Errorf("%q has control characters", a)
	}
	if _, err := mail.ParseAddress(a); err != nil {
		return fmt.Errorf("%q is not an email address: %v", a, err)
	}
	return nil
}

// checkCallback accepts an absolute http(s) URL with a host.
func checkCallback(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("%q is not a URL: %v", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%q: scheme must be http or https", raw)
	}
	if u.Host == "" {
		return fmt.Errorf("%q has no host", raw)
	}
	return nil
}
