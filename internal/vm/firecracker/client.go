package firecracker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
)

// Client speaks Firecracker's REST API (OpenAPI 2.0, see firecracker-api.yaml
// in the reference material) over the VMM's unix socket. It covers the
// endpoints the driver uses; the request and response types mirror the
// spec's definitions, and the tests check every body the driver sends
// against that spec. Its methods are safe for concurrent use.
type Client struct {
	hc *http.Client
}

// NewClient returns a Client for the API socket at sock.
func NewClient(sock string) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
		// One VMM answers one request at a time; a fresh connection per
		// call costs nothing on a unix socket and never reuses one the
		// VMM closed when it exited.
		DisableKeepAlives: true,
	}
	return &Client{hc: &http.Client{Transport: tr}}
}

// APIError is an answer of the API outside 2xx, with the Error definition's
// fault_message.
type APIError struct {
	Method, Path string
	Status       int
	Fault        string // fault_message; may be empty
}

func (e *APIError) Error() string {
	msg := e.Fault
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	return fmt.Sprintf("firecracker: %s %s: %d: %s", e.Method, e.Path, e.Status, msg)
}

// BootSource is the spec's BootSource.
type BootSource struct {
	KernelImagePath string `json:"kernel_image_path"`
	BootArgs        string `json:"boot_args,omitempty"`
	InitrdPath      string `json:"initrd_path,omitempty"`
}

// Drive is the spec's Drive, for virtio-block drives (is_read_only and
// path_on_host are required for them).
type Drive struct {
	DriveID      string `json:"drive_id"`
	PathOnHost   string `json:"path_on_host"`
	IsRootDevice bool   `json:"is_root_device"`
	IsReadOnly   bool   `json:"is_read_only"`
	CacheType    string `json:"cache_type,omitempty"` // Unsafe (default) or Writeback
	IOEngine     string `json:"io_engine,omitempty"`  // Sync (default) or Async
}

// MachineConfig is the spec's MachineConfiguration.
type MachineConfig struct {
	VCPUCount       int    `json:"vcpu_count"`
	MemSizeMiB      int    `json:"mem_size_mib"`
	SMT             bool   `json:"smt,omitempty"`
	TrackDirtyPages bool   `json:"track_dirty_pages,omitempty"`
	HugePages       string `json:"huge_pages,omitempty"`
	CPUTemplate     string `json:"cpu_template,omitempty"`
}

// NetworkInterface is the spec's NetworkInterface.
type NetworkInterface struct {
	IfaceID     string `json:"iface_id"`
	HostDevName string `json:"host_dev_name"`
	GuestMAC    string `json:"guest_mac,omitempty"`
	MTU         int    `json:"mtu,omitempty"`
}

// Vsock is the spec's Vsock: host connections to the guest go through the
// unix socket at UDSPath ("CONNECT <port>\n").
type Vsock struct {
	GuestCID uint32 `json:"guest_cid"`
	UDSPath  string `json:"uds_path"`
}

// Logger is the spec's Logger: where the VMM's own log goes.
type Logger struct {
	LogPath       string `json:"log_path,omitempty"`
	Level         string `json:"level,omitempty"`
	ShowLevel     bool   `json:"show_level,omitempty"`
	ShowLogOrigin bool   `json:"show_log_origin,omitempty"`
}

// Metrics is the spec's Metrics.
type Metrics struct {
	MetricsPath string `json:"metrics_path"`
}

// Actions of PUT /actions (InstanceActionInfo.action_type).
const (
	ActionInstanceStart  = "InstanceStart"
	ActionSendCtrlAltDel = "SendCtrlAltDel"
	ActionFlushMetrics   = "FlushMetrics"
)

// VM states of PATCH /vm (the spec's Vm.state).
const (
	VMPaused  = "Paused"
	VMResumed = "Resumed"
)

// Snapshot types of SnapshotCreateParams.snapshot_type.
const (
	SnapshotFull = "Full"
	SnapshotDiff = "Diff"
)

// SnapshotCreate is the spec's SnapshotCreateParams.
type SnapshotCreate struct {
	SnapshotType string `json:"snapshot_type,omitempty"`
	SnapshotPath string `json:"snapshot_path"`
	MemFilePath  string `json:"mem_file_path"`
}

// Memory backends of MemoryBackend.backend_type.
const (
	BackendFile = "File"
	BackendUffd = "Uffd"
)

// MemoryBackend is the spec's MemoryBackend.
type MemoryBackend struct {
	BackendType string `json:"backend_type"`
	BackendPath string `json:"backend_path"`
}

// NetworkOverride is the spec's NetworkOverride.
type NetworkOverride struct {
	IfaceID     string `json:"iface_id"`
	HostDevName string `json:"host_dev_name"`
}

// SnapshotLoad is the spec's SnapshotLoadParams. MemBackend replaces the
// deprecated mem_file_path.
type SnapshotLoad struct {
	SnapshotPath     string            `json:"snapshot_path"`
	MemBackend       *MemoryBackend    `json:"mem_backend,omitempty"`
	TrackDirtyPages  bool              `json:"track_dirty_pages,omitempty"`
	ResumeVM         bool              `json:"resume_vm,omitempty"`
	NetworkOverrides []NetworkOverride `json:"network_overrides,omitempty"`
}

// InstanceInfo is the spec's InstanceInfo (GET /).
type InstanceInfo struct {
	AppName    string `json:"app_name"`
	ID         string `json:"id"`
	State      string `json:"state"` // "Not started", "Running" or "Paused"
	VMMVersion string `json:"vmm_version"`
}

// PutBootSource sets the kernel and its command line. Pre-boot only.
func (c *Client) PutBootSource(ctx context.Context, b BootSource) error {
	return c.do(ctx, "PUT", "/boot-source", b, nil)
}

// PutDrive adds or replaces drive d.DriveID. Pre-boot only.
func (c *Client) PutDrive(ctx context.Context, d Drive) error {
	return c.do(ctx, "PUT", "/drives/"+url.PathEscape(d.DriveID), d, nil)
}

// PutMachineConfig sets vCPUs and memory. Pre-boot only.
func (c *Client) PutMachineConfig(ctx context.Context, m MachineConfig) error {
	return c.do(ctx, "PUT", "/machine-config", m, nil)
}

// MachineConfig reads the machine configuration.
func (c *Client) MachineConfig(ctx context.Context) (MachineConfig, error) {
	var m MachineConfig
	err := c.do(ctx, "GET", "/machine-config", nil, &m)
	return m, err
}

// PutNetworkInterface adds network interface n.IfaceID. Pre-boot only.
func (c *Client) PutNetworkInterface(ctx context.Context, n NetworkInterface) error {
	return c.do(ctx, "PUT", "/network-interfaces/"+url.PathEscape(n.IfaceID), n, nil)
}

// PutVsock adds the vsock device. Pre-boot only.
func (c *Client) PutVsock(ctx context.Context, v Vsock) error {
	return c.do(ctx, "PUT", "/vsock", v, nil)
}

// PutLogger sets up the VMM's own log. Allowed before a snapshot load.
func (c *Client) PutLogger(ctx context.Context, l Logger) error {
	return c.do(ctx, "PUT", "/logger", l, nil)
}

// PutMetrics sets up the VMM's metrics file.
func (c *Client) PutMetrics(ctx context.Context, m Metrics) error {
	return c.do(ctx, "PUT", "/metrics", m, nil)
}

// Action runs a synchronous action (ActionInstanceStart, ...).
func (c *Client) Action(ctx context.Context, action string) error {
	return c.do(ctx, "PUT", "/actions", struct {
		ActionType string `json:"action_type"`
	}{action}, nil)
}

// PatchVM pauses (VMPaused) or resumes (VMResumed) the microVM.
func (c *Client) PatchVM(ctx context.Context, state string) error {
	return c.do(ctx, "PATCH", "/vm", struct {
		State string `json:"state"`
	}{state}, nil)
}

// CreateSnapshot writes the paused microVM's state and memory to files.
func (c *Client) CreateSnapshot(ctx context.Context, s SnapshotCreate) error {
	return c.do(ctx, "PUT", "/snapshot/create", s, nil)
}

// LoadSnapshot restores a microVM into a fresh VMM.
func (c *Client) LoadSnapshot(ctx context.Context, s SnapshotLoad) error {
	return c.do(ctx, "PUT", "/snapshot/load", s, nil)
}

// Describe returns the instance information (GET /); it is also how the
// driver learns that a new VMM's API is up.
func (c *Client) Describe(ctx context.Context) (InstanceInfo, error) {
	var i InstanceInfo
	err := c.do(ctx, "GET", "/", nil, &i)
	return i, err
}

// maxAnswer bounds how much of an answer is read: the API's answers are
// small JSON documents.
const maxAnswer = 1 << 20

// do sends one request with body (JSON, unless nil) and decodes a 2xx
// answer into out (unless nil). Other answers are *APIError.
func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("firecracker: %s %s: %w", method, path, err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://localhost"+path, r)
	if err != nil {
		return fmt.Errorf("firecracker: %s %s: %w", method, path, err)
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("firecracker: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return fmt.Errorf("firecracker: %s %s: reading the answer: %w", method, path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		e := &APIError{Method: method, Path: path, Status: resp.StatusCode}
		var fault struct {
			FaultMessage string `json:"fault_message"`
		}
		if json.Unmarshal(b, &fault) == nil {
			e.Fault = fault.FaultMessage
		} else {
			e.Fault = string(bytes.TrimSpace(b))
		}
		return e
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("firecracker: %s %s: malformed answer: %w", method, path, err)
	}
	return nil
}

// isAPIError reports whether err is an answer of the API (as opposed to
// the VMM not answering at all).
func isAPIError(err error) bool {
	var e *APIError
	return errors.As(err, &e)
}
