package checkm

import (
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"fmt"
	"hash"
)

// algorithm is the one table of the digest algorithms ingestq checks, by
// their manifest names: how to make one's hash, and how many hex digits
// its digests have. It returns nil for any other name.
func algorithm(alg string) (newHash func() hash.Hash, hexLen int) {
	switch alg {
	case "md5":
		return md5.New, 2 * md5.Size
	case "sha1":
		return sha1.New, 2 * sha1.Size
	case "sha256":
		return sha256.New, 2 * sha256.Size
	case "sha512":
		return sha512.New, 2 * sha512.Size
	}
	return nil, 0
}

// NewHash returns a hash of a digest algorithm by its manifest name (md5,
// sha1, sha256, sha512; see HashAlgorithm for the other spellings), or nil
// for "": no digest declared.
func NewHash(alg string) (hash.Hash, error) {
	if alg == "" {
		return nil, nil
	}
	newHash, _ := algorithm(alg)
	if newHash == nil {
		return nil, fmt.Errorf("unknown hash algorithm %q (want md5, sha1, sha256 or sha512)", alg)
	}
	return newHash(), nil
}
