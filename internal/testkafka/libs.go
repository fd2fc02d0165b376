package testkafka

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// RepoRoot finds the module root (the folder holding offsetgate's go.mod) from the working
// directory upwards.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(b), "module offsetgate\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("testkafka: offsetgate's go.mod not found above the working directory")
		}
		dir = parent
	}
}

// LibsDir returns the folder with the pinned Kafka release's jars, fetching them with
// testenv/fetch-kafka.sh when they are not cached yet. OFFSETGATE_KAFKA_LIBS overrides it.
func LibsDir() (string, error) {
	if d := os.Getenv("OFFSETGATE_KAFKA_LIBS"); d != "" {
		return d, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	libs := filepath.Join(root, ".cache", "kafka-"+KafkaVersion, "libs")
	if _, err := os.Stat(filepath.Join(libs, "kafka_2.13-"+KafkaVersion+".jar")); err == nil {
		return libs, nil
	}
	cmd := exec.Command("bash", filepath.Join(root, "testenv", "fetch-kafka.sh"))
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("testkafka: fetching Kafka %s failed (Kafka is required; no test skips without it): %w\n%s",
			KafkaVersion, err, out)
	}
	return libs, nil
}
