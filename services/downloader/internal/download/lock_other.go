//go:build !unix

package download

import "os"

// lockFile cannot lock here: no partial file is shared between attempts,
// each writes one of its own (and none resumes another's).
func lockFile(*os.File) (bool, error) { return false, nil }
