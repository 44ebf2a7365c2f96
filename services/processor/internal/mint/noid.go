// Package mint gives a job its primary identifier, an ARK: from a counter
// kept in ZooKeeper with NOID-style names (the default), or from EZID.
package mint

import (
	"fmt"
	"strings"
)

// betanumeric is NOID's repertoire of "extended digits": digits and
// consonants without 'l', so that no word is spelled and no 1/l or 0/o pair
// is confused. Its prime size (29) is what lets the check character catch
// every single-character and transposition error.
const betanumeric = "0123456789bcdfghjkmnpqrstvwxz"

// CheckChar is the NOID Check Digit Algorithm (NCDA) of John Kunze's Noid
// (metacpan.org/dist/Noid, "NOID CHECK DIGIT ALGORITHM"): each character's
// ordinal in the betanumeric repertoire (0 for any other character, such
// as '/') is multiplied by its 1-based position, and the sum modulo 29
// indexes the repertoire. It is computed over the id without its "ark:/"
// label, e.g. "13030/tf5p30086" → 'k'.
func CheckChar(id string) byte {
	sum := 0
	for i := 0; i < len(id); i++ {
		if ord := strings.IndexByte(betanumeric, id[i]); ord > 0 {
			sum += ord * (i + 1)
		}
	}
	return betanumeric[sum%len(betanumeric)]
}

// Betanumeric writes n in base 29 with the betanumeric digits, at least
// width characters wide (padded with '0').
func Betanumeric(n int64, width int) string {
	if n < 0 {
		panic(fmt.Sprintf("mint: negative counter %d", n))
	}
	var digits []byte
	for n > 0 || len(digits) == 0 {
		digits = append(digits, betanumeric[n%29])
		n /= 29
	}
	for len(digits) < width {
		digits = append(digits, '0')
	}
	for i, j := 0, len(digits)-1; i < j; i, j = i+1, j-1 {
		digits[i], digits[j] = digits[j], digits[i]
	}
	return string(digits)
}

// arkLabel is the label every ARK starts with; NCDA runs over what follows.
const arkLabel = "ark:/"

// ValidShoulder checks that a shoulder is "ark:/NAAN/" followed by
// betanumeric characters, as in "ark:/99999/fk4": ids minted on it then
// consist of characters the check character covers.
func ValidShoulder(shoulder string) error {
	rest, ok := strings.CutPrefix(shoulder, arkLabel)
	if !ok {
		return fmt.Errorf("shoulder %q does not start with %q", shoulder, arkLabel)
	}
	naan, blade, ok := strings.Cut(rest, "/")
	if !ok || naan == "" {
		return fmt.Errorf("shoulder %q has no NAAN (want ark:/NAAN/prefix, e.g. ark:/99999/fk4)", shoulder)
	}
	for _, part := range []string{naan, blade} {
		for _, r := range part {
			if !strings.ContainsRune(betanumeric, r) {
				return fmt.Errorf("shoulder %q: %q is not a betanumeric character (%s)", shoulder, r, betanumeric)
			}
		}
	}
	return nil
}

// NOIDName is the n-th id of a shoulder: the shoulder, n in betanumeric
// (at least bladeWidth characters), and the NCDA check character.
func NOIDName(shoulder string, n int64) string {
	id := shoulder + Betanumeric(n, bladeWidth)
	return id + string(CheckChar(strings.TrimPrefix(id, arkLabel)))
}

// bladeWidth pads the counter so that early ids look like EZID's
// (ark:/99999/fk4 + 6 characters + check): 29^6 ≈ 595 million ids before
// names grow longer.
const bladeWidth = 6
