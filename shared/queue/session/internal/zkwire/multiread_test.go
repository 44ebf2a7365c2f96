package zkwire

import (
	"errors"
	"testing"

	"github.com/go-zookeeper/zk"
)

// A multiRead answers each node as go-zookeeper's getData does: its data
// and stat, or zk.ErrNoNode.
func TestMultiReadReadsNodesAndReportsMissingOnes(t *testing.T) {
	c, root := connect(t)
	nodes := map[string][]byte{"json": []byte(`{"status":"Pending"}`), "empty": nil, "large": make([]byte, 200<<10)}
	for name, data := range nodes {
		if _, err := c.Create(root+"/"+name, data, 0, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
	}
	// A version other than 0, to see that stats are decoded in place.
	if _, err := c.Set(root+"/json", nodes["json"], 0); err != nil {
		t.Fatal(err)
	}
	paths := []string{root + "/json", root + "/missing", root + "/empty", root + "/large"}
	got, err := c.MultiRead(paths)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(paths) {
		t.Fatalf("%d results for %d paths", len(got), len(paths))
	}
	for i, p := range paths {
		wantData, wantStat, wantErr := c.Get(p)
		r := got[i]
		if !errors.Is(r.Err, wantErr) && !(r.Err == nil && wantErr == nil) {
			t.Errorf("%s: error %v, want %v", p, r.Err, wantErr)
			continue
		}
		if wantErr != nil {
			continue
		}
		if string(r.Data) != string(wantData) || *r.Stat != *wantStat {
			t.Errorf("%s: %d bytes, stat %+v; getData says %d bytes, stat %+v", p, len(r.Data), r.Stat, len(wantData), wantStat)
		}
	}
}

func TestEncodingAMultiReadRefusesABufferTooSmall(t *testing.T) {
	req := &multiReadRequest{paths: []string{"/a/long/path/to/some/node"}}
	buf := make([]byte, 64)
	n, err := req.Encode(buf)
	if err != nil {
		t.Fatal(err)
	}
	for size := range n {
		if _, err := req.Encode(buf[:size]); !errors.Is(err, zk.ErrShortBuffer) {
			t.Errorf("encoding into %d of the %d bytes needed: %v, want %v", size, n, err, zk.ErrShortBuffer)
		}
	}
	var res multiReadResponse
	if _, err := res.Decode([]byte{0, 0, 0, 4, 0, 0, 0}); !errors.Is(err, zk.ErrShortBuffer) {
		t.Errorf("decoding a cut answer: %v, want %v", err, zk.ErrShortBuffer)
	}
}
