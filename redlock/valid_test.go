package redlock

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
)

// TestValidNames checks ValidName and ValidToken against the regular
// expressions that define them (for names, the one in openapi.yaml, which
// leaves out "." and ".."), on every byte and on random strings around the
// length limits.
func TestValidNames(t *testing.T) {
	nameRe := regexp.MustCompile(`^([A-Za-z0-9._:-]*[A-Za-z0-9_:-][A-Za-z0-9._:-]*|[A-Za-z0-9._:-]{3,})$`)
	tokenRe := regexp.MustCompile(`^[A-Za-z0-9_-]{22,128}$`)
	validName := func(s string) bool { return len(s) <= MaxNameLen && nameRe.MatchString(s) }
	for _, s := range []string{".", ".."} {
		if ValidName(s) {
			t.Errorf("ValidName(%q) = true: a client normalises it away", s)
		}
	}
	cases := []string{"", ".", "..", "...", ".a", "a.", "..a", "a..", ".:", "-.", "._"}
	for b := range 256 {
		cases = append(cases, string([]byte{byte(b)}), strings.Repeat("a", 21)+string([]byte{byte(b)}))
	}
	alphabet := "aZ09._:-_ /\n\x00é"
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 21, 22, 23, 127, 128, 129, 199, 200, 201} {
		for range 50 {
			var sb strings.Builder
			for range n {
				if r.IntN(20) == 0 {
					sb.WriteByte(alphabet[r.IntN(len(alphabet))])
				} else {
					sb.WriteByte("abcXYZ019_-.:"[r.IntN(13)])
				}
			}
			cases = append(cases, sb.String())
		}
	}
	for _, s := range cases {
		if got, want := ValidName(s), validName(s); got != want {
			t.Errorf("ValidName(%q) = %v, want %v", s, got, want)
		}
		if got, want := ValidToken(s), tokenRe.MatchString(s); got != want {
			t.Errorf("ValidToken(%q) = %v, want %v", s, got, want)
		}
	}
}
