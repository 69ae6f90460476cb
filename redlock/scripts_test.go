package redlock

import (
	"io/fs"
	"regexp"
	"strings"
	"testing"
)

// TestScriptsDefineWhatTheyCall: every script that the files can make (each
// file, and each wrapper around each lock script) defines each prelude
// function it calls before its first call: a function missing from a script
// would fail only when a run reaches the call.
func TestScriptsDefineWhatTheyCall(t *testing.T) {
	files, err := fs.Glob(lua, "*.lua")
	if err != nil {
		t.Fatal(err)
	}
	included := map[string]bool{"prelude.lua": true}
	for _, f := range files {
		for _, m := range includeLine.FindAllStringSubmatch(embedded(f), -1) {
			included[m[1]] = true
		}
	}
	var wrappers, locks []string
	for _, f := range files {
		switch {
		case included[f]:
		case bodyLine.MatchString(embedded(f)):
			wrappers = append(wrappers, f)
		default:
			locks = append(locks, f)
		}
	}
	check := func(name, src string) {
		t.Helper()
		for _, f := range prelude {
			call := f.call.FindStringIndex(src)
			if call == nil {
				continue
			}
			if def := strings.Index(src, "local function "+f.name+"("); def < 0 || def+len("local function ") != call[0] {
				t.Errorf("%s calls %s before it defines it (or never does)", name, f.name)
			}
		}
	}
	for _, l := range locks {
		check(l, compose(l))
		for _, w := range wrappers {
			check(w+" around "+l, compose(w, l))
		}
	}
	if len(locks) < 9 || len(wrappers) < 3 || len(prelude) < 10 {
		t.Fatalf("%d lock scripts, %d wrappers, %d prelude functions: the files were not read", len(locks), len(wrappers), len(prelude))
	}
}

// TestPreludeOnlyFunctions: a statement outside the prelude's functions
// would be lost when the functions are cut out, so it stops the package.
func TestPreludeOnlyFunctions(t *testing.T) {
	cut := cutPrelude("-- a comment\nlocal function a(x)\n  return x\nend\n\nlocal function b()\n  return a(1)\nend\n")
	if len(cut) != 2 || cut[0].name != "a" || cut[1].name != "b" {
		t.Fatalf("cut %v, want the functions a and b", cut)
	}
	if got := withPrelude("return 0"); regexp.MustCompile(`local function`).MatchString(got) {
		t.Errorf("a script that calls no prelude function got some:\n%s", got)
	}
	defer func() {
		if recover() == nil {
			t.Error("a prelude with a statement outside its functions was taken")
		}
	}()
	cutPrelude("local function a()\n  return 1\nend\nlocal limit = 3\n")
}
