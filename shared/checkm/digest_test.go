package checkm

import (
	"encoding/hex"
	"testing"
)

func TestNewHashKnowsTheManifestAlgorithmsAndTheirLengths(t *testing.T) {
	for _, alg := range []string{"md5", "sha1", "sha256", "sha512"} {
		h, err := NewHash(alg)
		if err != nil {
			t.Fatalf("%s: %v", alg, err)
		}
		if got := len(hex.EncodeToString(h.Sum(nil))); got != digestLen(alg) {
			t.Errorf("%s digest has %d hex digits, the parser wants %d", alg, got, digestLen(alg))
		}
	}
	if h, err := NewHash(""); h != nil || err != nil {
		t.Errorf(`NewHash("") = %v, %v; want none`, h, err)
	}
	if _, err := NewHash("crc32"); err == nil || err.Error() != `unknown hash algorithm "crc32" (want md5, sha1, sha256 or sha512)` {
		t.Errorf("NewHash(crc32): %v", err)
	}
}
