// Command offsetgate is a Kafka protocol proxy that gives a destination cluster
// produce-at-offset, so topics mirror exactly and consumers cut over live.
//
// One binary, several subcommands; run `offsetgate help` for the list.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// command is one subcommand. run gets the arguments after the subcommand's name and returns
// the process exit code.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

func commands() []command {
	return []command{
		{"serve", "run the proxy in front of a destination cluster", runServe},
		{"mirror", "mirror topics from a source cluster through offsetgate, offsets included", runMirror},
		{"status", "show every mirror partition: mirrored end, shift segments, epoch, lag, halts", runStatus},
		{"verify", "compare a topic on the source and through offsetgate, batch by batch (exit 0 identical, 1 different, 2 error, 3 lost at the head)", runVerify},
		{"cutover", "move a consumer group live from the source to the destination (source listeners; --wait, --abort)", runCutover},
		{"promote", "make a mirror topic an ordinary one once its source is retired (removes the mirror mark)", runPromote},
		{"demo", "the whole journey in one process on embedded clusters: mirror a topic, move a consumer group, verify", runDemo},
		{"version", "print the version and the protocol library it was built with", runVersion},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	os.Exit(dispatch(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "help", "-h", "--help", "-help":
		usage(stdout)
		return 0
	case "--version", "-version":
		return runVersion(ctx, nil, stdout, stderr)
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(ctx, args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "offsetgate: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "offsetgate: exact Kafka topic mirroring (offsets included) and live consumer cut-over")
	fmt.Fprintln(w, "\nUsage: offsetgate COMMAND [flags]\n\nCommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun `offsetgate COMMAND --help` for a command's flags.")
	fmt.Fprintln(w, "\nmirror, status, verify and promote take the same flags for offsetgate's address and identity")
	fmt.Fprintln(w, "(--proxy, --source, --tls-ca, --tls-cert, --tls-key, --sasl-mechanism, --sasl-user, --sasl-password-file),")
	fmt.Fprintln(w, "or --client-config FILE (key=value lines with the same names), or the environment: OFFSETGATE_PROXY,")
	fmt.Fprintln(w, "OFFSETGATE_SOURCE, OFFSETGATE_TLS_CA, OFFSETGATE_TLS_CERT, OFFSETGATE_TLS_KEY, OFFSETGATE_SASL_MECHANISM,")
	fmt.Fprintln(w, "OFFSETGATE_SASL_USER, OFFSETGATE_SASL_PASSWORD_FILE, OFFSETGATE_SASL_PASSWORD, OFFSETGATE_CLIENT_CONFIG.")
	fmt.Fprintln(w, "Flags come first, then the file, then the environment.")
}

// newFlagSet is a subcommand's flag set (errors are returned, not fatal).
func newFlagSet(name string) *flag.FlagSet { return flag.NewFlagSet(name, flag.ContinueOnError) }

// parseFlags parses a subcommand's flags and maps --help to exit 0 and bad flags to exit 2.
func parseFlags(fs *flag.FlagSet, args []string) (exit int, done bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, true
		}
		return 2, true
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "offsetgate %s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return 2, true
	}
	return 0, false
}
