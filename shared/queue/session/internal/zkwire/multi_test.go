package zkwire

import (
	"slices"
	"strings"
	"testing"

	"github.com/go-zookeeper/zk"
)

// TestMultiAnswersAsTheLibrarysMulti: the same multis, sent by Conn.Multi
// and by go-zookeeper's Multi on two copies of one tree, are
// applied alike and answered alike: every operation's path, stat and
// error, the call's error, whether they succeed or one fails (a node
// missing or there already, a version moved on) at the first, a middle or
// the last operation.
func TestMultiAnswersAsTheLibrarysMulti(t *testing.T) {
	c, root := connect(t)
	conn := c.Conn // the library's own
	acl := zk.WorldACL(zk.PermAll)
	for _, side := range []string{"/lib", "/own"} {
		for _, p := range []string{"", "/a", "/b"} {
			if _, err := conn.Create(root+side+p, []byte("x"), 0, acl); err != nil {
				t.Fatal(err)
			}
		}
	}
	type build func(root string) []any
	cases := []struct {
		name string
		ops  build
	}{
		{"all applied", func(r string) []any {
			return []any{
				&zk.CreateRequest{Path: r + "/c", Data: []byte("data"), Acl: acl},
				&zk.CreateRequest{Path: r + "/e", Acl: acl, Flags: zk.FlagEphemeral},
				&zk.CreateRequest{Path: r + "/s-", Data: []byte{}, Acl: acl, Flags: zk.FlagSequence},
				&zk.SetDataRequest{Path: r + "/a", Data: []byte(strings.Repeat("é", 700)), Version: 0},
				&zk.CheckVersionRequest{Path: r + "/a", Version: 1},
				&zk.SetDataRequest{Path: r + "/b", Data: nil, Version: -1},
				&zk.DeleteRequest{Path: r + "/c", Version: -1},
			}
		}},
		{"first fails: node missing", func(r string) []any {
			return []any{&zk.SetDataRequest{Path: r + "/missing", Data: []byte("x"), Version: -1}, &zk.DeleteRequest{Path: r + "/e", Version: -1}}
		}},
		{"a middle one fails: version moved on", func(r string) []any {
			return []any{&zk.SetDataRequest{Path: r + "/a", Data: []byte("y"), Version: -1},
				&zk.CheckVersionRequest{Path: r + "/b", Version: 7}, &zk.DeleteRequest{Path: r + "/e", Version: -1}}
		}},
		{"the last fails: node there already", func(r string) []any {
			return []any{&zk.DeleteRequest{Path: r + "/e", Version: -1}, &zk.CreateRequest{Path: r + "/a", Acl: acl}}
		}},
		{"a delete of a node with children", func(r string) []any {
			return []any{&zk.DeleteRequest{Path: r, Version: -1}}
		}},
		{"no operation", func(string) []any { return nil }},
	}
	sameErr := func(a, b error) bool { return a == b || (a != nil && b != nil && a.Error() == b.Error()) }
	for _, tc := range cases {
		lib, libErr := conn.Multi(tc.ops(root + "/lib")...)
		own, ownErr := c.Multi(tc.ops(root + "/own")...)
		if !sameErr(libErr, ownErr) {
			broken(t, assumeMulti, "%s: error %v, the library's %v", tc.name, ownErr, libErr)
		}
		if len(own) != len(lib) {
			broken(t, assumeMulti, "%s: %d answers, the library's %d", tc.name, len(own), len(lib))
			continue
		}
		for i := range lib {
			l, o := lib[i], own[i]
			if strings.Replace(l.String, "/lib", "/own", 1) != o.String || !sameErr(l.Error, o.Error) || (l.Stat == nil) != (o.Stat == nil) ||
				(l.Stat != nil && (l.Stat.Version != o.Stat.Version || l.Stat.DataLength != o.Stat.DataLength)) {
				broken(t, assumeMulti, "%s: answer %d %+v, the library's %+v", tc.name, i, o, l)
			}
		}
	}
	for _, p := range []string{"", "/a", "/b", "/e", "/c"} {
		ld, ls, lerr := conn.Get(root + "/lib" + p)
		od, os, oerr := conn.Get(root + "/own" + p)
		if lerr != oerr || string(ld) != string(od) || (ls != nil && (ls.Version != os.Version || (ls.EphemeralOwner == 0) != (os.EphemeralOwner == 0))) {
			broken(t, assumeMulti, "%s: %q %v (%v), the library's %q %v (%v)", p, od, os, oerr, ld, ls, lerr)
		}
	}
	lch, _, _ := conn.Children(root + "/lib")
	och, _, _ := conn.Children(root + "/own")
	slices.Sort(lch)
	slices.Sort(och)
	if !slices.Equal(lch, och) {
		broken(t, assumeMulti, "children %v, the library's %v", och, lch)
	}
	// A request past the client's buffer is refused as the library refuses it.
	big := []any{&zk.SetDataRequest{Path: root + "/own/a", Data: make([]byte, 2<<20), Version: -1}}
	if _, err := c.Multi(big...); err == nil {
		t.Error("a multi past the client's buffer was sent")
	}
}
