package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// GuestConfig is what a VM driver hands the agent that is its guest's init
// (`berth agent --vm-init --config /dev/vdb`): the rest of the agent's
// command line, the environment, and files to write before anything
// starts. It travels as JSON on a small read-only block device rather than
// on the kernel command line, which is short (a few KiB with every flag,
// hook and command) and readable by everything in the guest through
// /proc/cmdline, while the environment may hold resolved secrets.
type GuestConfig struct {
	// Args are agent flags and COMMAND, as on the command line (without
	// --config and --vm-init).
	Args []string `json:"args"`
	// Env is the complete environment ("KEY=value") of the agent and so of
	// the hooks, COMMAND and execs; what the kernel gave init is dropped.
	Env []string `json:"env,omitempty"`
	// Hostname, if set, becomes the guest's host name.
	Hostname string `json:"hostname,omitempty"`
	// Files maps absolute paths to contents written (mode 0600, parents
	// created 0700) before the agent starts listening, e.g. the initial
	// lease file.
	Files map[string]string `json:"files,omitempty"`
}

// guestConfigBlock is the size the encoded config is padded to: block
// devices are made of 512-byte sectors.
const guestConfigBlock = 512

// EncodeGuestConfig returns c as the contents of a config drive: its JSON,
// padded with NUL bytes to a whole number of 512-byte sectors. The agent
// reads the first JSON value and ignores the padding.
func EncodeGuestConfig(c GuestConfig) ([]byte, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	if n := len(b) % guestConfigBlock; n != 0 {
		b = append(b, make([]byte, guestConfigBlock-n)...)
	}
	return b, nil
}

// readGuestConfig reads a GuestConfig from path (a file or a block device).
func readGuestConfig(path string) (GuestConfig, error) {
	f, err := os.Open(path)
	if err != nil {
		return GuestConfig{}, err
	}
	defer f.Close()
	var c GuestConfig
	if err := json.NewDecoder(f).Decode(&c); err != nil {
		return GuestConfig{}, fmt.Errorf("%s: %w", path, err)
	}
	for _, kv := range c.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return GuestConfig{}, fmt.Errorf("%s: bad environment entry %q", path, kv)
		}
	}
	for p := range c.Files {
		if !filepath.IsAbs(p) {
			return GuestConfig{}, fmt.Errorf("%s: file path %q is not absolute", path, p)
		}
	}
	return c, nil
}

// apply sets the environment and host name and writes the files.
func (c GuestConfig) apply() error {
	os.Clearenv()
	for _, kv := range c.Env {
		k, v, _ := strings.Cut(kv, "=")
		if err := os.Setenv(k, v); err != nil {
			return err
		}
	}
	if c.Hostname != "" {
		if err := setHostname(c.Hostname); err != nil {
			return fmt.Errorf("setting the host name: %w", err)
		}
	}
	for p, content := range c.Files {
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			return err
		}
	}
	if len(c.Args) == 0 {
		return errors.New("the config has no agent arguments")
	}
	return nil
}
