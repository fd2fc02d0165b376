package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version is set at build time with -ldflags "-X main.version=..."; "dev" otherwise.
var version = "dev"

func runVersion(_ context.Context, _ []string, stdout, _ io.Writer) int {
	kmsgVersion := "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/twmb/franz-go/pkg/kmsg" {
				kmsgVersion = d.Version
			}
		}
	}
	fmt.Fprintf(stdout, "offsetgate %s (%s, kmsg %s)\n", version, runtime.Version(), kmsgVersion)
	return 0
}
