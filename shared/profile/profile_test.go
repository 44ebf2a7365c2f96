package profile_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ingestq/ingestq/shared/profile"
)

func TestExampleProfilesLoad(t *testing.T) {
	set, err := profile.Load(filepath.Join("..", "..", "examples", "profiles"))
	if err != nil {
		t.Fatal(err)
	}
	demo, ok := set.Get("demo")
	if !ok {
		t.Fatalf("no demo profile in %v", set.Names())
	}
	want := profile.Profile{Name: "demo", Collection: "demo", Owner: "ark:/99999/fk4owner",
		NotificationAddresses: []string{"depositor@example.org"}, Priority: 5, NotifyOnQueue: true, StorageTarget: "local"}
	if !reflect.DeepEqual(*demo, want) {
		t.Errorf("demo = %+v, want %+v", *demo, want)
	}
}

func TestParseAcceptsProfilesAndFillsDefaults(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want profile.Profile
	}{
		{
			name: "only the required keys",
			yaml: "name: minimal\ncollection: min_coll\n",
			want: profile.Profile{Name: "minimal", Collection: "min_coll", Owner: "min_coll", Priority: 5, StorageTarget: "local"},
		},
		{
			name: "every key",
			yaml: `name: full-profile
collection: Full-1
owner: ark:/99999/fk4owner
notification_addresses: ["a@example.org", "Depositor Two <b@example.org>"]
callback_url: https://127.0.0.1:8443/cb?batch=1
priority: 0
notify_on_queue: true
storage_target: node-9501
`,
			want: profile.Profile{Name: "full-profile", Collection: "Full-1", Owner: "ark:/99999/fk4owner",
				NotificationAddresses: []string{"a@example.org", "Depositor Two <b@example.org>"},
				CallbackURL:           "https://127.0.0.1:8443/cb?batch=1", Priority: 0, NotifyOnQueue: true, StorageTarget: "node-9501"},
		},
		{
			name: "priority 99 and a null owner",
			yaml: "name: p\ncollection: c\npriority: 99\nowner:\n",
			want: profile.Profile{Name: "p", Collection: "c", Owner: "c", Priority: 99, StorageTarget: "local"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := profile.Parse("x.yaml", []byte(tt.yaml))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(*p, tt.want) {
				t.Errorf("got  %+v\nwant %+v", *p, tt.want)
			}
		})
	}
}

func TestParseRefusesBadProfiles(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want string // the whole error
	}{
		{"unknown key", "name: a\ncollection: c\ncolection: d\n",
			`bad.yaml: line 3: unknown key "colection" (known: name, collection, owner, notification_addresses, callback_url, priority, notify_on_queue, storage_target)`},
		{"repeated key", "name: a\ncollection: c\nname: b\n", "bad.yaml: line 3: name: repeats the key of line 1"},
		{"no name", "collection: c\n", "bad.yaml: name: required"},
		{"no collection", "name: a\n", "bad.yaml: collection: required"},
		{"collection with a space", "name: a\ncollection: my coll\n", `bad.yaml: collection: "my coll" may hold only letters, digits, '_' and '-'`},
		{"name with a slash", "name: a/b\ncollection: c\n", `bad.yaml: name: "a/b" may hold only letters, digits, '_' and '-'`},
		{"name too long", "name: " + strings.Repeat("n", 129) + "\ncollection: c\n", "bad.yaml: name: longer than 128 characters"},
		{"owner with a space", "name: a\ncollection: c\nowner: ark:/99999/fk4 x\n", `bad.yaml: owner: "ark:/99999/fk4 x" has spaces, control characters or invalid UTF-8`},
		{"storage target with a tab", "name: a\ncollection: c\nstorage_target: \"a\\tb\"\n", `bad.yaml: storage_target: "a\tb" has spaces, control characters or invalid UTF-8`},
		{"not an email address", "name: a\ncollection: c\nnotification_addresses: [depositor]\n",
			`bad.yaml: notification_addresses[0]: "depositor" is not an email address: mail: missing '@' or angle-addr`},
		{"two addresses in one item", "name: a\ncollection: c\nnotification_addresses: [\"a@example.org, b@example.org\"]\n",
			`bad.yaml: notification_addresses[0]: "a@example.org, b@example.org" is not an email address: mail: expected single address, got ", b@example.org"`},
		{"address injecting a header", "name: a\ncollection: c\nnotification_addresses: [\"a@example.org\\r\\nBcc: x@example.org\"]\n",
			`bad.yaml: notification_addresses[0]: "a@example.org\r\nBcc: x@example.org" has control characters`},
		{"addresses as one string", "name: a\ncollection: c\nnotification_addresses: a@example.org\n",
			"bad.yaml: line 3: notification_addresses: want a list of addresses, e.g. [depositor@example.org], not a !!str value"},
		{"callback with another scheme", "name: a\ncollection: c\ncallback_url: ftp://127.0.0.1/cb\n", `bad.yaml: callback_url: "ftp://127.0.0.1/cb": scheme must be http or https`},
		{"callback without host", "name: a\ncollection: c\ncallback_url: http:///cb\n", `bad.yaml: callback_url: "http:///cb" has no host`},
		{"callback not a URL", "name: a\ncollection: c\ncallback_url: \"http://127.0.0.1/%zz\"\n", `bad.yaml: callback_url: "http://127.0.0.1/%zz" is not a URL: invalid URL escape "%zz"`},
		{"priority 100", "name: a\ncollection: c\npriority: 100\n", "bad.yaml: priority: 100 is outside 0..99"},
		{"negative priority", "name: a\ncollection: c\npriority: -1\n", "bad.yaml: priority: -1 is outside 0..99"},
		{"priority as a word", "name: a\ncollection: c\npriority: high\n", "bad.yaml: line 3: priority: cannot unmarshal !!str `high` into int"},
		{"notify_on_queue as a number", "name: a\ncollection: c\nnotify_on_queue: 2\n", "bad.yaml: line 3: notify_on_queue: cannot unmarshal !!int `2` into bool"},
		{"name as a mapping", "name: {x: 1}\ncollection: c\n", "bad.yaml: line 1: name: cannot unmarshal !!map into string"},
		{"a list, not a mapping", "- name: a\n", "bad.yaml: line 1: a profile is a mapping of keys to values"},
		{"empty file", "", "bad.yaml: empty profile"},
		{"only a comment", "# nothing\n", "bad.yaml: empty profile"},
		{"two documents", "name: a\ncollection: c\n---\nname: b\ncollection: c\n", "bad.yaml: one profile per file: a second YAML document follows"},
		{"YAML syntax error", "name: a\n  collection: c\n", "bad.yaml: yaml: line 2: mapping values are not allowed in this context"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := profile.Parse("bad.yaml", []byte(tt.yaml))
			if err == nil {
				t.Fatalf("accepted: %+v", p)
			}
			if err.Error() != tt.want {
				t.Errorf("error = %q\n   want %q", err, tt.want)
			}
		})
	}
}

func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestLoadReadsYAMLFilesOnly(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"b.yml":            "name: beta\ncollection: b\n",
		"a.yaml":           "name: alpha\ncollection: a\npriority: 1\n",
		"UPPER.YAML":       "name: gamma\ncollection: g\n",
		"notes.txt":        "not a profile",
		".editor-tmp.yaml": "broken: [",
		"sub/deep.yaml":    "name: deep\ncollection: d\n",
	})
	set, err := profile.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := set.Names(), []string{"alpha", "beta", "gamma"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Names = %v, want %v", got, want)
	}
	if p, ok := set.Get("alpha"); !ok || p.Priority != 1 || p.Collection != "a" {
		t.Errorf("alpha = %+v, %v", p, ok)
	}
	if _, ok := set.Get("deep"); ok {
		t.Errorf("a profile of a subdirectory was loaded")
	}
}

func TestLoadReportsEveryBadFile(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"a.yaml":     "name: same\ncollection: a\n",
		"b.yaml":     "name: same\ncollection: b\n",
		"c.yaml":     "name: c\ncollection: c\nnotify: yes\n",
		"d.yml":      "name: d\ncollection: d\npriority: 500\n",
		"large.yaml": "name: large\ncollection: l\n#" + strings.Repeat("x", profile.MaxFileBytes) + "\n",
	})
	_, err := profile.Load(dir)
	if err == nil {
		t.Fatal("Load accepted the directory")
	}
	for _, want := range []string{
		filepath.Join(dir, "b.yaml") + `: name: profile "same" is already defined in ` + filepath.Join(dir, "a.yaml"),
		filepath.Join(dir, "c.yaml") + `: line 3: unknown key "notify"`,
		filepath.Join(dir, "d.yml") + ": priority: 500 is outside 0..99",
		filepath.Join(dir, "large.yaml") + ": larger than 1048576 bytes",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q\ndoes not say %q", err, want)
		}
	}
}

func TestLoadRefusesADirectoryWithoutProfiles(t *testing.T) {
	empty := writeFiles(t, map[string]string{"readme.txt": "no profiles here"})
	if _, err := profile.Load(empty); err == nil || !strings.Contains(err.Error(), "has no *.yaml or *.yml profile") {
		t.Errorf("empty dir: error = %v", err)
	}
	missing := filepath.Join(t.TempDir(), "nowhere")
	if _, err := profile.Load(missing); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing dir: error = %v", err)
	}
}

func TestSetHandsOutCopies(t *testing.T) {
	dir := writeFiles(t, map[string]string{"p.yaml": "name: p\ncollection: c\nnotification_addresses: [a@example.org]\n"})
	set, err := profile.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := set.Get("p")
	p.Collection = "changed"
	p.NotificationAddresses[0] = "changed@example.org"
	set.Names()[0] = "changed"
	again, _ := set.Get("p")
	if again.Collection != "c" || again.NotificationAddresses[0] != "a@example.org" || set.Names()[0] != "p" {
		t.Errorf("a caller changed the set: %+v %v", again, set.Names())
	}
	if _, ok := set.Get("absent"); ok {
		t.Errorf("Get of an absent profile succeeded")
	}
}
