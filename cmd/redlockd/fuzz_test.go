package main

import (
	"errors"
	"flag"
	"fmt"
	"net/url"
	"strings"
	"testing"
)

// fuzzSecret starts every password the fuzz target puts in a Redis URL, so
// that it is recognisable in any output.
const fuzzSecret = "Pz9SECRETq"

// FuzzParseServeFlags parses arbitrary command lines and environments: it
// must never panic, every error must be a *UsageError (or flag.ErrHelp), and
// no error message nor printed Config may show a Redis password. args and
// env are newline-separated; in both, "PW" is replaced by a recognisable
// secret (fuzzSecret followed by the fuzzer's pw, any characters) and "EP"
// by its percent-encoded form. When the secret lands once, in the password
// of a --redis URL (flag, environment variable or stray argument), it must
// show nowhere, in any form.
func FuzzParseServeFlags(f *testing.F) {
	for _, seed := range []struct{ args, env, pw string }{
		{"--redis\nredis://u:PW@h:1", "", "x"},
		{"--redis=rediss://:PW@h:1,redis://h2:2/3", "", "a,b"},
		{"--redis\nredis://u:PW@h:1/x", "", "@/?#"},
		{"--redis\nredis://u:EP@h:1/x", "", "@/?#%"},
		{"--redis\nhttp://u:PW@h:1", "", "p"},
		{"--redis\nredis://u:PW@h:1:2", "", "p"},
		{"--redis\nredis://u:PW@h b:1", "", "p"},
		{"--redis\nredis://u:PW@h:1/?dial_timeout=x", "", "p"},
		{"--redis\nredis://:PW@h:1,redis://:x@h:1", "", "dup"},
		{"--listen\n:0\nredis://u:PW@h:1", "", "p"},
		{"redis://u:EP@h:1", "", "p q"},
		{"--listen\n:0\n--max-waiters\n-1\n--read-header-timeout\n0s", "", ""},
		{"--api-keys-file\nk.json\n--metrics-auth\non", "", ""},
		{"--redis-ca-file\nca.pem\n--redis\nredis://:PW@h", "", "%41"},
		{"--help", "", ""},
		{"", "REDLOCKD_REDIS=redis://u:PW@h:1/x\nREDLOCKD_LISTEN=nope", "pw"},
		{"", "REDLOCKD_MAX_WAITERS=lots\nREDLOCKD_IDLE_TIMEOUT=-1s", ""},
		{"--drift-factor\nNaN\n--max-ttl\n1ns", "REDLOCKD_TLS_CERT=c", ""},
	} {
		f.Add(seed.args, seed.env, seed.pw)
	}
	f.Fuzz(func(t *testing.T, args, env, pw string) {
		if strings.Contains(args+env, fuzzSecret) {
			return // the secret comes only from the placeholders
		}
		secret := fuzzSecret + pw
		encoded := url.QueryEscape(secret)
		subst := func(s string) string {
			s = strings.ReplaceAll(s, "PW", secret)
			return strings.ReplaceAll(s, "EP", encoded)
		}
		var argv []string
		if args != "" {
			for a := range strings.SplitSeq(args, "\n") {
				argv = append(argv, subst(a))
			}
		}
		envm := map[string]string{}
		for line := range strings.SplitSeq(env, "\n") {
			if k, v, ok := strings.Cut(line, "="); ok {
				envm[k] = subst(v)
			}
		}
		lookup := func(k string) (string, bool) { v, ok := envm[k]; return v, ok }

		c, err := ParseServeFlags(argv, lookup)
		var shown []string
		if err != nil {
			var ue *UsageError
			if !errors.Is(err, flag.ErrHelp) && !errors.As(err, &ue) {
				t.Fatalf("ParseServeFlags: %T %v, want *UsageError", err, err)
			}
			shown = append(shown, err.Error())
		} else if err := c.Validate(); err != nil {
			var ue *UsageError
			if !errors.As(err, &ue) {
				t.Fatalf("Validate: %T %v, want *UsageError", err, err)
			}
			shown = append(shown, err.Error())
		}
		shown = append(shown, c.String(), fmt.Sprint(c), fmt.Sprintf("%+v", c), fmt.Sprintf("%#v", c), urlList(c.Redis).String())

		// Where did the secret land?
		all := strings.Join(argv, "\n")
		for _, v := range envm {
			all += "\n" + v
		}
		if strings.Count(all, fuzzSecret) != 1 {
			return // nowhere, or in several places: some of them may be shown rightly
		}
		var urlValues []string
		for _, v := range redisValues(argv) {
			urlValues = append(urlValues, strings.Split(v, ",")...)
		}
		urlValues = append(urlValues, strings.Split(envm["REDLOCKD_REDIS"], ",")...)
		var password string
		for _, v := range urlValues {
			if p, ok := passwordIn(v); ok {
				password = p
			}
		}
		if password == "" {
			return
		}
		for _, s := range shown {
			for _, form := range []string{password, url.QueryEscape(password), url.PathEscape(password)} {
				if strings.Contains(s, form) {
					t.Fatalf("the password %q is shown: %q\nargs %q env %q", password, s, argv, envm)
				}
			}
		}
	})
}

// redisValues returns the --redis values of a serve command line and its
// first positional argument, where flag.Parse would stop (every serve flag
// takes a value).
func redisValues(argv []string) []string {
	var out []string
	for i := 0; i < len(argv); i++ {
		a := argv[i]
		switch {
		case a == "--":
			if i+1 < len(argv) {
				out = append(out, argv[i+1])
			}
			return out
		case !strings.HasPrefix(a, "-") || a == "-":
			return append(out, a) // a stray argument
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !hasValue {
			if i+1 >= len(argv) {
				return out
			}
			i++
			value = argv[i]
		}
		if name == "redis" {
			out = append(out, value)
		}
	}
	return out
}

// passwordIn returns the part of the URL v that is its password and holds
// fuzzSecret: the password of a URL that parses, or for one that does not,
// everything between its scheme and its last "@".
func passwordIn(v string) (string, bool) {
	v = strings.TrimSpace(v)
	if u, err := url.Parse(v); err == nil {
		if p, ok := u.User.Password(); ok && strings.Contains(p, fuzzSecret) {
			return p, true
		}
		return "", false
	}
	scheme, at, i := strings.Index(v, "://"), strings.LastIndex(v, "@"), strings.Index(v, fuzzSecret)
	if scheme < 0 || i < scheme+3 || i > at {
		return "", false
	}
	return v[scheme+3 : at], true
}
