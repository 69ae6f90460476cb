package main

import (
	"net/url"
	"strings"
)

// redactURL returns raw fit to be shown: a URL (or a stray argument)
// without its password (xxxxx), query or fragment; a placeholder when raw
// does not parse, or has an @ that is not a URL's user info.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || (u.User == nil && strings.Contains(raw, "@")) {
		return "<not shown: it may contain a password>"
	}
	return redact(u)
}

// hidePassword returns v, or redactURL(v) if it may hold a user and
// password: a Redis URL given where something else was expected.
func hidePassword(v string) string {
	if strings.Contains(v, "@") {
		return redactURL(v)
	}
	return v
}

// redact shows u without its password, query or fragment: go-redis takes no
// secret in the query, but a user may try ?password=.
func redact(u *url.URL) string {
	v := *u
	suffix := ""
	if v.RawQuery != "" || v.ForceQuery {
		suffix = "?…"
	}
	v.RawQuery, v.ForceQuery, v.Fragment, v.RawFragment = "", false, "", ""
	return v.Redacted() + suffix
}
