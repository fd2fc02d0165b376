package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"offsetgate/proxy"
)

func runServe(ctx context.Context, args []string, _, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "YAML configuration file (flags override it)")
	bootstrap := fs.String("bootstrap", "", "destination brokers, host:port[,host:port...]")
	listen := fs.String("listen", "", "bootstrap listener host:port of a single-listener configuration; broker N listens on port+1+N (several listeners: listeners in --config)")
	advertise := fs.String("advertise", "", "host clients of the single listener are told to connect to (default: the listen host)")
	admin := fs.String("admin", "", "admin listener for /metrics, /healthz, /readyz (host:port)")
	transport := fs.String("transport", "", "gnet (default) or goroutine")
	logFormat := fs.String("log-format", "", "json or console (default: console on a terminal, json otherwise)")
	logLevel := fs.String("log-level", "", "debug, info, warn or error")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: offsetgate serve --config FILE | --bootstrap HOST:PORT --listen HOST:PORT [--advertise HOST]")
		fs.PrintDefaults()
	}
	if code, done := parseFlags(fs, args); done {
		return code
	}
	var cfg proxy.Config
	if *configPath != "" {
		c, err := proxy.LoadConfig(*configPath)
		if err != nil {
			fmt.Fprintln(stderr, "offsetgate serve:", err)
			return 2
		}
		cfg = c
	}
	if *bootstrap != "" {
		cfg.Bootstrap = strings.Split(*bootstrap, ",")
	}
	set := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	set(&cfg.Listen, *listen)
	set(&cfg.Advertise, *advertise)
	set(&cfg.Admin, *admin)
	set(&cfg.Transport, *transport)
	set(&cfg.Log.Format, *logFormat)
	set(&cfg.Log.Level, *logLevel)
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(stderr, "offsetgate serve: invalid configuration:\n"+err.Error())
		return 2
	}
	log, err := newLogger(cfg.Log, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "offsetgate serve:", err)
		return 2
	}
	defer func() { _ = log.Sync() }()
	applyRuntimeLimits(cfg.Limits, os.LookupEnv)
	srv, err := proxy.New(cfg, log)
	if err != nil {
		fmt.Fprintln(stderr, "offsetgate serve:", err)
		return 2
	}
	if err := srv.Run(ctx); err != nil {
		log.Error("offsetgate stopped", zap.Error(err))
		return 1
	}
	return 0
}

// newLogger builds the process logger: JSON by default, console on a terminal.
func newLogger(c proxy.LogConfig, w io.Writer) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(c.Level)
	if err != nil {
		return nil, fmt.Errorf("log level: %w", err)
	}
	format := c.Format
	if format == "" {
		format = "json"
		if f, ok := w.(*os.File); ok {
			if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
				format = "console"
			}
		}
	}
	ec := zap.NewProductionEncoderConfig()
	ec.EncodeTime = zapcore.ISO8601TimeEncoder
	var enc zapcore.Encoder
	if format == "console" {
		ec.EncodeLevel = zapcore.CapitalColorLevelEncoder
		enc = zapcore.NewConsoleEncoder(ec)
	} else {
		enc = zapcore.NewJSONEncoder(ec)
	}
	core := zapcore.NewCore(enc, zapcore.AddSync(w), zap.NewAtomicLevelAt(lvl))
	// Repeated messages are sampled so that a storm of bad connections cannot flood the log.
	core = zapcore.NewSamplerWithOptions(core, 1e9, 100, 100)
	return zap.New(core).Named("offsetgate"), nil
}

// applyRuntimeLimits sets the Go runtime's soft memory limit and collector target from the
// configuration, except where the environment sets them (GOMEMLIMIT, GOGC): the runtime has
// read those already, and an operator's explicit setting wins.
func applyRuntimeLimits(l proxy.Limits, lookupEnv func(string) (string, bool)) {
	if _, set := lookupEnv("GOMEMLIMIT"); !set && l.MemoryLimitBytes > 0 {
		debug.SetMemoryLimit(l.MemoryLimitBytes)
	}
	if _, set := lookupEnv("GOGC"); !set && l.GCPercent > 0 {
		debug.SetGCPercent(l.GCPercent)
	}
}
