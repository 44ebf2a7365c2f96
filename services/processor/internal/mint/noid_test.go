package mint

import (
	"strings"
	"testing"
)

func TestCheckCharMatchesPublishedNOIDExamples(t *testing.T) {
	for _, tc := range []struct {
		id   string
		want byte
	}{
		// Noid's documentation, "NOID CHECK DIGIT ALGORITHM" (metacpan.org/dist/Noid/view/noid).
		{"13030/xf93gt2", 'q'},
		// The ARK every ARK primer shows: ark:/13030/tf5p30086k.
		{"13030/tf5p30086", 'k'},
		// Characters outside the repertoire count 0 but still take a position.
		{"/", '0'},
	} {
		if got := CheckChar(tc.id); got != tc.want {
			t.Errorf("CheckChar(%q) = %q, want %q", tc.id, got, tc.want)
		}
	}
}

func TestCheckCharCatchesEverySingleSubstitutionAndTransposition(t *testing.T) {
	id := "99999/fk4" + Betanumeric(123456789, 6)
	good := CheckChar(id)
	for i := range id {
		if id[i] == '/' {
			continue
		}
		for _, r := range betanumeric {
			if byte(r) == id[i] {
				continue
			}
			bad := id[:i] + string(r) + id[i+1:]
			if CheckChar(bad) == good {
				t.Errorf("substituting %q at %d in %s keeps check char %q", r, i, id, good)
			}
		}
		if i+1 < len(id) && id[i] != id[i+1] && id[i+1] != '/' {
			swapped := id[:i] + string(id[i+1]) + string(id[i]) + id[i+2:]
			if CheckChar(swapped) == good {
				t.Errorf("transposing %d,%d in %s keeps check char %q", i, i+1, id, good)
			}
		}
	}
}

func TestBetanumericIsBase29Padded(t *testing.T) {
	for _, tc := range []struct {
		n     int64
		width int
		want  string
	}{
		{0, 0, "0"},
		{0, 3, "000"},
		{28, 1, "z"},
		{29, 1, "10"},
		{29*29 + 10, 5, "0010b"},
	} {
		if got := Betanumeric(tc.n, tc.width); got != tc.want {
			t.Errorf("Betanumeric(%d, %d) = %q, want %q", tc.n, tc.width, got, tc.want)
		}
	}
}

func TestNOIDNameIsShoulderBladeAndCheckChar(t *testing.T) {
	got := NOIDName("ark:/99999/fk4", 1)
	if !strings.HasPrefix(got, "ark:/99999/fk4000001") || len(got) != len("ark:/99999/fk4000001")+1 {
		t.Fatalf("NOIDName = %q, want ark:/99999/fk4000001 + check char", got)
	}
	if c := CheckChar(strings.TrimPrefix(got[:len(got)-1], "ark:/")); got[len(got)-1] != c {
		t.Errorf("NOIDName = %q, its last char is not the check char %q", got, c)
	}
	if NOIDName("ark:/99999/fk4", 1) == NOIDName("ark:/99999/fk4", 2) {
		t.Error("two counters gave one name")
	}
}

func TestValidShoulderRefusesWhatNCDACannotCover(t *testing.T) {
	for _, tc := range []struct {
		shoulder string
		wantErr  string
	}{
		{"ark:/99999/fk4", ""},
		{"ark:/13030/", ""},
		{"99999/fk4", `does not start with "ark:/"`},
		{"ark:/99999", "has no NAAN"},
		{"ark://fk4", "has no NAAN"},
		{"ark:/99999/FK4", "'F' is not a betanumeric"},
		{"ark:/99999/fl4", "'l' is not a betanumeric"},
	} {
		err := ValidShoulder(tc.shoulder)
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("ValidShoulder(%q) = %v, want %q", tc.shoulder, err, tc.wantErr)
		}
	}
}
