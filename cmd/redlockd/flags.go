package main

import (
	"errors"
	"flag"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/redlockd/redlockd/redlock"
)

// Flag values and messages shared by every subcommand: flags are named as
// users type them (--max-ttl), a duration without a unit says so, and every
// on/off flag takes the same spellings.

// onOff is the flag.Value of every on/off flag. Given alone (--insecure) it
// means on; serve also takes its value as the next argument (see
// joinOnOffValues).
type onOff bool

// onOffSpellings lists what onOff accepts, any case; the help and
// docs/configuration.md show the same list.
const onOffSpellings = "on/off, true/false, yes/no or 1/0"

func (b onOff) String() string {
	if b {
		return "on"
	}
	return "off"
}

func (b *onOff) Set(s string) error {
	switch strings.ToLower(s) {
	case "on", "true", "yes", "1":
		*b = true
	case "off", "false", "no", "0":
		*b = false
	default:
		return errors.New("want " + onOffSpellings)
	}
	return nil
}

// IsBoolFlag lets the flag be given alone, meaning on.
func (b *onOff) IsBoolFlag() bool { return true }

// quarantineMode is the flag.Value of --restart-quarantine: auto, or on or
// off in any spelling of onOff.
type quarantineMode redlock.Quarantine

func (q quarantineMode) String() string { return string(q) }

func (q *quarantineMode) Set(s string) error {
	if strings.EqualFold(s, string(redlock.QuarantineAuto)) {
		*q = quarantineMode(redlock.QuarantineAuto)
		return nil
	}
	var b onOff
	if b.Set(s) != nil {
		return errors.New("want auto, or " + onOffSpellings)
	}
	*q = quarantineMode(redlock.QuarantineOff)
	if b {
		*q = quarantineMode(redlock.QuarantineOn)
	}
	return nil
}

// duration is the flag.Value of every duration flag: unlike the flag
// package's, its errors say what is wrong.
type duration time.Duration

func (d duration) String() string { return time.Duration(d).String() }

func (d *duration) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		if _, numErr := strconv.ParseFloat(s, 64); numErr == nil {
			return fmt.Errorf("missing unit, e.g. %ss", s)
		}
		return errors.New("not a duration, e.g. 50ms, 30s or 1m")
	}
	*d = duration(v)
	return nil
}

// flagMessage matches the errors of flag.FlagSet.Parse, to name flags with
// two dashes and put the value next to its flag.
var flagMessage = regexp.MustCompile(`^(?:invalid (?:boolean )?value ("(?:[^"\\]|\\.)*") for (?:flag )?-(\S+): (.*)|flag provided but not defined: -(\S+)|flag needs an argument: -(\S+))$`)

// parseFlags parses args with fs and returns flag.ErrHelp, a *UsageError
// that names the flag as users type it, or nil.
func parseFlags(fs *flag.FlagSet, args []string) error {
	err := fs.Parse(args)
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return err
	}
	m := flagMessage.FindStringSubmatch(err.Error())
	switch {
	case m == nil:
		return &UsageError{Err: err}
	case m[4] != "":
		return usageErrorf("unknown flag --%s", m[4])
	case m[5] != "":
		return usageErrorf("--%s needs a value", m[5])
	}
	value, _ := strconv.Unquote(m[1])
	return usageErrorf("--%s %s: %s", m[2], showValue(value), numberMessage(m[3]))
}

// showValue quotes v when it would not read as one word, and hides what
// could be the password of a Redis URL (given to the wrong flag).
func showValue(v string) string {
	v = hidePassword(v)
	if v == "" || strings.ContainsFunc(v, func(r rune) bool { return r <= ' ' || r == '"' || !strconv.IsPrint(r) }) {
		return strconv.Quote(v)
	}
	return v
}

// numberMessage rewords the errors of the flag package's numeric values.
func numberMessage(msg string) string {
	switch msg {
	case "parse error":
		return "not a number"
	case "value out of range":
		return "out of range"
	}
	return msg
}

// joinOnOffValues returns serve's args with each on/off flag that is
// followed by a value not starting with "-" joined to it
// (--metrics-auth on becomes --metrics-auth=on): serve takes no arguments,
// so the value cannot be one, and the separate form keeps working.
func joinOnOffValues(fs *flag.FlagSet, args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...)
		}
		if f := fs.Lookup(strings.TrimLeft(a, "-")); f != nil && strings.HasPrefix(a, "-") && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			if _, ok := f.Value.(*onOff); ok {
				a += "=" + args[i+1]
				i++
			}
		}
		out = append(out, a)
	}
	return out
}

// urlList is the flag.Value of --redis: comma-separated URLs. Setting it
// replaces the list. String redacts passwords.
type urlList []string

func (l urlList) String() string {
	out := make([]string, len(l))
	for i, r := range l {
		out[i] = redactURL(r)
	}
	return strings.Join(out, ",")
}

func (l *urlList) Set(s string) error {
	*l = nil
	for part := range strings.SplitSeq(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			*l = append(*l, part)
		}
	}
	return nil
}
