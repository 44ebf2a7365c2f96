package queue

import (
	"bytes"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The codec reads what any writer left in ZooKeeper: peers, operators'
// tools, careless scripts. Its fuzz tests hold it to two properties, for
// every node's decoder: it never panics (a bad node is an error naming the
// node), and what it accepts it writes back in a form it reads as the same
// message, which it then writes byte for byte the same way again. (The
// first rewrite may drop what the spec's format cannot hold: sub-second
// parts of a peer's RFC 3339 time.) Seed corpora: testdata/fuzz/<name>.

// roundTrip checks both properties for one decoder and its encoder.
func roundTrip[M proto.Message](t *testing.T, data []byte, decode func(string, []byte) (M, error), encode func(M) []byte) {
	const path = "/fuzz/node"
	first, err := decode(path, data)
	if err != nil {
		if !bytes.Contains([]byte(err.Error()), []byte(path)) {
			t.Fatalf("error does not name the node: %v", err)
		}
		return
	}
	written := encode(first)
	second, err := decode(path, written)
	if err != nil {
		t.Fatalf("%s read back: %v\nfrom %q", written, err, data)
	}
	if want := wholeSeconds(first); !proto.Equal(second, want) {
		t.Fatalf("%q read as %v, written as %s, read back as %v", data, want, written, second)
	}
	if again := encode(second); !bytes.Equal(again, written) {
		t.Fatalf("written as %s, then as %s", written, again)
	}
}

// wholeSeconds is m with every timestamp field cut to the second, the
// spec's precision.
func wholeSeconds[M proto.Message](m M) M {
	out := proto.Clone(m).(M)
	r := out.ProtoReflect()
	var stamps []protoreflect.FieldDescriptor
	r.Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
		if fd.Message() != nil && fd.Message().FullName() == "google.protobuf.Timestamp" && fd.Cardinality() != protoreflect.Repeated {
			stamps = append(stamps, fd)
		}
		return true
	})
	for _, fd := range stamps {
		ts := r.Get(fd).Message().Interface().(*timestamppb.Timestamp)
		r.Set(fd, protoreflect.ValueOfMessage(timestamppb.New(ts.AsTime().Truncate(time.Second)).ProtoReflect()))
	}
	return out
}

func FuzzDecodeJobStatus(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) { roundTrip(t, data, DecodeJobStatus, EncodeJobStatus) })
}

func FuzzDecodeBatchStatus(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) { roundTrip(t, data, DecodeBatchStatus, EncodeBatchStatus) })
}

func FuzzDecodeStatusReport(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) { roundTrip(t, data, DecodeStatusReport, encodeStatusReport) })
}

func FuzzDecodeSubmission(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) { roundTrip(t, data, DecodeSubmission, EncodeSubmission) })
}

func FuzzDecodeConfiguration(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) { roundTrip(t, data, DecodeConfiguration, encodeConfiguration) })
}

func FuzzDecodeIdentifiers(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) { roundTrip(t, data, DecodeIdentifiers, EncodeIdentifiers) })
}

func FuzzDecodeMetadata(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) { roundTrip(t, data, DecodeMetadata, EncodeMetadata) })
}

func FuzzDecodeStore(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) { roundTrip(t, data, DecodeStore, EncodeStore) })
}

func FuzzDecodeInventory(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) { roundTrip(t, data, DecodeInventory, EncodeInventory) })
}

func FuzzDecodeManifest(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) { roundTrip(t, data, DecodeManifest, EncodeManifest) })
}

// FuzzDecodeInt covers the decimal-text nodes (priority, space_needed).
func FuzzDecodeInt(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		n, err := DecodeInt("/fuzz/priority", data)
		if err != nil {
			if !bytes.Contains([]byte(err.Error()), []byte("/fuzz/priority")) {
				t.Fatalf("error does not name the node: %v", err)
			}
			return
		}
		written := EncodeInt(n)
		if back, err := DecodeInt("/fuzz/priority", written); err != nil || back != n {
			t.Fatalf("%q read as %d, written as %s, read back as %d (%v)", data, n, written, back, err)
		}
	})
}

// FuzzParseEntry reads the names of state-folder entries, which any writer
// may create: what it accepts names a valid job and a priority that the
// name our writers give that job reads back the same.
func FuzzParseEntry(f *testing.F) {
	f.Fuzz(func(t *testing.T, name string) {
		e, ok := ParseEntry(name)
		if !ok {
			return
		}
		priority, jid := e.Priority, e.JID
		if !ValidJobID(jid) || priority < 0 {
			t.Fatalf("%q read as priority %d, job %q", name, priority, jid)
		}
		if back, ok := ParseEntry(EntryName(priority, jid)); !ok || back.Priority != priority || back.JID != jid {
			t.Fatalf("%q read as %d %s, written as %q, read back as %d %s (%v)", name, priority, jid, EntryName(priority, jid), back.Priority, back.JID, ok)
		}
	})
}
