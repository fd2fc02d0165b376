// Package realclients runs the non-Go Kafka clients that offsetgate's end-to-end tests use: the
// Apache Kafka Java client (from the same Maven cache as the brokers), kcat and confluent-kafka
// for Python (both librdkafka). They print one line per consumed record:
//
//	partition offset leaderEpoch key value
package realclients

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"offsetgate/internal/testkafka"
)

// Record is one consumed record as a client printed it.
type Record struct {
	Partition int32
	Offset    int64
	Epoch     int32
	Key       string
	Value     string
}

func run(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w\nstderr: %s", filepath.Base(name), strings.Join(args, " "), err, tailString(errb.String(), 3000))
	}
	return out.String(), nil
}

func tailString(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

func javaBin() string {
	if h := os.Getenv("JAVA_HOME"); h != "" {
		return filepath.Join(h, "bin", "java")
	}
	return "java"
}

func testenv(parts ...string) (string, error) {
	root, err := testkafka.RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(append([]string{root, "testenv"}, parts...)...), nil
}

// JavaProduce produces count records keyed PREFIX-kI with values PREFIX-vI with the Java
// client (acks=all); a non-empty txnID makes it one committed transaction.
func JavaProduce(ctx context.Context, bootstrap, topic string, count int, prefix, txnID string) error {
	return JavaProducePaced(ctx, bootstrap, topic, count, prefix, txnID, 0)
}

// JavaProducePaced is JavaProduce with a pause of pauseMs between two sends: a steady producer.
func JavaProducePaced(ctx context.Context, bootstrap, topic string, count int, prefix, txnID string, pauseMs int) error {
	libs, err := testkafka.LibsDir()
	if err != nil {
		return err
	}
	src, err := testenv("java", "ClientTool.java")
	if err != nil {
		return err
	}
	args := []string{"-Xmx256m", "-Dpause.ms=" + strconv.Itoa(pauseMs), "-cp", filepath.Join(libs, "*"), src, "produce", bootstrap, topic, strconv.Itoa(count), prefix}
	if txnID != "" {
		args = append(args, txnID)
	}
	_, err = run(ctx, javaBin(), args...)
	return err
}

// JavaConsume reads count records with the Java client (read_committed), from the beginning of
// every partition, or as a member of group when it is not empty (committing as it goes).
func JavaConsume(ctx context.Context, bootstrap, topic string, count int, timeoutMs int, group string) ([]Record, error) {
	return javaConsume(ctx, bootstrap, topic, count, timeoutMs, JavaOptions{Group: group})
}

// JavaConsumeSlow is JavaConsume taking at most maxPoll records per poll and pausing pauseMs
// after each (0: the client's defaults, no pause), so a test can change the cluster under it.
func JavaConsumeSlow(ctx context.Context, bootstrap, topic string, count int, timeoutMs int, group string, maxPoll, pauseMs int) ([]Record, error) {
	return javaConsume(ctx, bootstrap, topic, count, timeoutMs, JavaOptions{Group: group, MaxPoll: maxPoll, PauseMs: pauseMs})
}

// JavaConsumeAt consumes at an isolation level ("read_committed", the Java tool's default, or
// "read_uncommitted").
func JavaConsumeAt(ctx context.Context, bootstrap, topic string, count int, timeoutMs int, isolation string) ([]Record, error) {
	return javaConsume(ctx, bootstrap, topic, count, timeoutMs, JavaOptions{Isolation: isolation})
}

// JavaOptions are a Java consumer's settings beyond its bootstrap, topic, count and timeout.
type JavaOptions struct {
	// Group, when not empty, makes the consumer a member of it (committing as it goes);
	// otherwise it reads every partition from the beginning.
	Group string
	// MaxPoll caps the records of a poll and PauseMs pauses after each (0: the client's
	// default, no pause).
	MaxPoll, PauseMs int
	// Isolation is the isolation level (default read_committed).
	Isolation string
	// Props are more consumer properties (fetch.max.bytes, ...).
	Props map[string]string
}

// JavaConsumeStream runs a Java consumer as JavaConsume does and calls each for every record
// as the client prints it, so that a test can act while the consumer reads; it returns when
// the client exits. bootstrap may list several addresses, comma-separated.
func JavaConsumeStream(ctx context.Context, bootstrap, topic string, count int, timeoutMs int, o JavaOptions, each func(Record)) error {
	args, err := javaConsumeArgs(bootstrap, topic, count, timeoutMs, o)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, javaBin(), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	sc := bufio.NewScanner(out)
	var perr error
	for sc.Scan() {
		r, ok, err := parseLine(sc.Text())
		if err != nil && perr == nil {
			perr = err
		}
		if ok && perr == nil {
			each(r)
		}
	}
	if err := sc.Err(); err != nil && perr == nil {
		perr = err
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("java consume %s %s: %w\nstderr: %s", bootstrap, topic, err, tailString(errb.String(), 3000))
	}
	return perr
}

func javaConsumeArgs(bootstrap, topic string, count int, timeoutMs int, o JavaOptions) ([]string, error) {
	libs, err := testkafka.LibsDir()
	if err != nil {
		return nil, err
	}
	src, err := testenv("java", "ClientTool.java")
	if err != nil {
		return nil, err
	}
	args := []string{"-Xmx256m"}
	if o.MaxPoll > 0 {
		args = append(args, "-Dmax.poll.records="+strconv.Itoa(o.MaxPoll))
	}
	if o.PauseMs > 0 {
		args = append(args, "-Dpause.ms="+strconv.Itoa(o.PauseMs))
	}
	if o.Isolation != "" {
		args = append(args, "-Disolation.level="+o.Isolation)
	}
	keys := make([]string, 0, len(o.Props))
	for k := range o.Props {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		args = append(args, "-Dkafka."+k+"="+o.Props[k])
	}
	args = append(args, "-cp", filepath.Join(libs, "*"), src, "consume", bootstrap, topic, strconv.Itoa(count), strconv.Itoa(timeoutMs))
	if o.Group != "" {
		args = append(args, o.Group)
	}
	return args, nil
}

func javaConsume(ctx context.Context, bootstrap, topic string, count int, timeoutMs int, o JavaOptions) ([]Record, error) {
	args, err := javaConsumeArgs(bootstrap, topic, count, timeoutMs, o)
	if err != nil {
		return nil, err
	}
	out, err := run(ctx, javaBin(), args...)
	if err != nil {
		return nil, err
	}
	return parse(out)
}

// PythonProduce produces with confluent-kafka.
func PythonProduce(ctx context.Context, bootstrap, topic string, count int, prefix string) error {
	src, err := testenv("python", "client.py")
	if err != nil {
		return err
	}
	_, err = run(ctx, "python3", src, "produce", bootstrap, topic, strconv.Itoa(count), prefix)
	return err
}

// PythonConsume consumes with confluent-kafka.
func PythonConsume(ctx context.Context, bootstrap, topic string, count int, timeoutS float64, group string) ([]Record, error) {
	src, err := testenv("python", "client.py")
	if err != nil {
		return nil, err
	}
	args := []string{src, "consume", bootstrap, topic, strconv.Itoa(count), strconv.FormatFloat(timeoutS, 'f', 1, 64)}
	if group != "" {
		args = append(args, group)
	}
	out, err := run(ctx, "python3", args...)
	if err != nil {
		return nil, err
	}
	return parse(out)
}

// KcatProduce produces key:value lines with kcat (librdkafka), acks=all.
func KcatProduce(ctx context.Context, bootstrap, topic string, count int, prefix string) error {
	var in strings.Builder
	for i := 0; i < count; i++ {
		fmt.Fprintf(&in, "%s-k%d:%s-v%d\n", prefix, i, prefix, i)
	}
	cmd := exec.CommandContext(ctx, "kcat", "-P", "-b", bootstrap, "-t", topic, "-K", ":", "-X", "acks=all")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stdin = strings.NewReader(in.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("kcat produce: %w: %s", err, out)
	}
	return nil
}

// KcatConsume reads count records from the beginning with kcat.
func KcatConsume(ctx context.Context, bootstrap, topic string, count int) ([]Record, error) {
	// Tab-separated: an empty key or value (a tombstone) is an empty field, not a missing one.
	out, err := run(ctx, "kcat", "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-c", strconv.Itoa(count),
		"-e", "-q", "-f", "%p\t%o\t%k\t%s\n")
	if err != nil {
		return nil, err
	}
	var recs []Record
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if line == "" {
			continue
		}
		f := strings.SplitN(line, "\t", 4)
		if len(f) != 4 {
			return nil, fmt.Errorf("realclients: bad kcat line %q", line)
		}
		p, err1 := strconv.ParseInt(f[0], 10, 32)
		o, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("realclients: bad kcat line %q", line)
		}
		recs = append(recs, Record{Partition: int32(p), Offset: o, Epoch: -1, Key: f[2], Value: f[3]})
	}
	return recs, nil
}

func parse(out string) ([]Record, error) {
	var recs []Record
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		r, ok, err := parseLine(sc.Text())
		if err != nil {
			return nil, err
		}
		if ok {
			recs = append(recs, r)
		}
	}
	return recs, sc.Err()
}

// parseLine reads a record line (partition offset leaderEpoch key value); ok is false for a
// line of another shape (the client's own messages).
func parseLine(line string) (r Record, ok bool, err error) {
	f := strings.Fields(line)
	if len(f) != 5 {
		return Record{}, false, nil
	}
	p, err1 := strconv.ParseInt(f[0], 10, 32)
	o, err2 := strconv.ParseInt(f[1], 10, 64)
	e, err3 := strconv.ParseInt(f[2], 10, 32)
	if err1 != nil || err2 != nil || err3 != nil {
		return Record{}, false, fmt.Errorf("realclients: bad record line %q", line)
	}
	return Record{Partition: int32(p), Offset: o, Epoch: int32(e), Key: f[3], Value: f[4]}, true, nil
}

// JavaProducePerf writes count records of size bytes with Kafka's own producer benchmark
// (org.apache.kafka.tools.ProducerPerformance, the Java client, acks=all) in batches of up to 1
// MiB: Produce requests of several hundred KiB each.
func JavaProducePerf(ctx context.Context, bootstrap, topic string, count, size int) error {
	libs, err := testkafka.LibsDir()
	if err != nil {
		return err
	}
	_, err = run(ctx, javaBin(), "-Xmx256m", "-cp", filepath.Join(libs, "*"), "org.apache.kafka.tools.ProducerPerformance",
		"--topic", topic, "--num-records", strconv.Itoa(count), "--record-size", strconv.Itoa(size), "--throughput", "-1",
		"--producer-props", "bootstrap.servers="+bootstrap, "acks=all", "batch.size=1048576", "linger.ms=20")
	return err
}

// KcatProduceLarge writes count records of size bytes with kcat (librdkafka) in batches of up
// to 1 MB, lingering 50 ms: Produce requests of several hundred KiB each.
func KcatProduceLarge(ctx context.Context, bootstrap, topic string, count, size int) error {
	line := strings.Repeat("x", size-1) + "\n"
	cmd := exec.CommandContext(ctx, "kcat", "-P", "-b", bootstrap, "-t", topic, "-X", "acks=all", "-X", "linger.ms=50",
		"-X", "batch.size=1000000", "-X", "batch.num.messages=100000")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stdin = strings.NewReader(strings.Repeat(line, count))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("kcat produce: %w: %s", err, out)
	}
	return nil
}
