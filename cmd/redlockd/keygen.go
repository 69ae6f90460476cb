package main

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/redlockd/redlockd/redlock"
	"github.com/redlockd/redlockd/server"
)

// apiKeyBytes is the number of random bytes in an API key: 256 bits.
const apiKeyBytes = 32

// keygenHelp is the help of `redlockd keygen`.
const keygenHelp = `Usage: redlockd keygen --name NAME --namespace NAMESPACE

Makes a new API key (32 random bytes, base64url) and prints two lines: the key,
for the client to send as Authorization: Bearer <key> (redlockd run:
--api-key-file); and its entry for the gateway's --api-keys-file, a JSON object
with the key's SHA-256 (the file never holds the key). Add the entry to the
file's "keys" list and reload the gateways (SIGHUP).

The key reaches only the locks of NAMESPACE; several keys may share one. NAME
names the key in the gateway's logs. Both are 1-200 characters of
[A-Za-z0-9._:-], other than "." and "..".

Flags:
  --name NAME            name of the key (required)
  --namespace NAMESPACE  lock namespace the key reaches (required)

Exit status: 0, or 64 on a usage error.
`

// runKeygen is `redlockd keygen`.
func runKeygen(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("keygen", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	name := fs.String("name", "", "")
	namespace := fs.String("namespace", "", "")
	if err := parseFlags(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, keygenHelp)
			return exitOK
		}
		return usage(stderr, fmt.Errorf("keygen: %w", err))
	}
	if errs := problems([]check{
		{fs.NArg() > 0, fmt.Sprintf("keygen takes no arguments, got %q", fs.Arg(0))},
		{!redlock.ValidName(*name), `keygen: --name must be 1-200 characters of [A-Za-z0-9._:-], other than "." and ".."`},
		{!redlock.ValidName(*namespace), `keygen: --namespace must be 1-200 characters of [A-Za-z0-9._:-], other than "." and ".."`},
	}); len(errs) > 0 {
		return usage(stderr, errors.Join(errs...))
	}
	b := make([]byte, apiKeyBytes)
	_, _ = rand.Read(b) // crypto/rand crashes the program rather than fail
	key := base64.RawURLEncoding.EncodeToString(b)
	entry, _ := json.Marshal(server.APIKey{Name: *name, Namespace: *namespace, SHA256: server.HashKey(key)}) // strings: cannot fail
	fmt.Fprintf(stdout, "%s\n%s\n", key, entry)
	return exitOK
}
