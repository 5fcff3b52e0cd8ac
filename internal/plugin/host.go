package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"sync"
	"time"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/store"
	"github.com/berth-dev/berth/internal/web"
)

// Records is where the host keeps its records (package store).
type Records interface {
	PluginRecords(ctx context.Context) ([]store.PluginRecord, error)
	PutPluginRecord(ctx context.Context, p store.PluginRecord, add []store.PluginInstall) error
	PluginInstalls(ctx context.Context) ([]store.PluginInstall, error)
	PutPluginInstall(ctx context.Context, in store.PluginInstall) error
	DeletePluginInstall(ctx context.Context, plugin, namespace string) error
}

// Error codes of the envelope (app-lb.md §2.2).
const (
	CodeDisabled     = "plugin_disabled"
	CodeNotInstalled = "plugin_not_installed"
)

// emptyConfig is the config of a plugin or install nobody configured.
var emptyConfig = json.RawMessage(`{}`)

var idPattern = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)

// Host keeps the compiled-in plugins, their records and their installs.
// It is safe for concurrent use.
type Host struct {
	records Records
	now     func() time.Time
	ids     []string // sorted
	byID    map[string]*entry

	write sync.Mutex   // serializes changes (store, then memory)
	mu    sync.RWMutex // guards the entries' records, installs and lastError
}

type entry struct {
	p         Plugin
	info      Info
	config    *schema
	install   *schema // nil: not per-namespace
	rec       store.PluginRecord
	installs  map[string]store.PluginInstall
	lastError string
}

// Options configure a Host.
type Options struct {
	Records Records
	Plugins []Plugin
	Now     func() time.Time // default time.Now
}

// New returns a host of o.Plugins with the records of o.Records, and
// applies the config of each enabled plugin (an Apply error is its
// last_error, not New's). It fails on a plugin that is not well formed (a
// bad id, a duplicate, a schema that does not compile or refuses {}) and
// when the records cannot be read.
func New(ctx context.Context, o Options) (*Host, error) {
	h := &Host{records: o.Records, now: o.Now, byID: map[string]*entry{}}
	if h.now == nil {
		h.now = time.Now
	}
	for _, p := range o.Plugins {
		info := p.Info()
		if !idPattern.MatchString(info.ID) {
			return nil, fmt.Errorf("plugin: id %q: want lowercase letters, digits and dashes", info.ID)
		}
		if h.byID[info.ID] != nil {
			return nil, fmt.Errorf("plugin: two plugins with id %q", info.ID)
		}
		e := &entry{p: p, info: info, installs: map[string]store.PluginInstall{},
			rec: store.PluginRecord{ID: info.ID, Config: emptyConfig, Enabled: info.DefaultEnabled}}
		var err error
		if e.config, err = compile(info.ID, info.ConfigSchema); err != nil {
			return nil, err
		}
		if err := e.config.check("config", emptyConfig); err != nil {
			return nil, fmt.Errorf("plugin: %s: its config schema refuses {}: %v", info.ID, err)
		}
		if info.PerNamespace() {
			if e.install, err = compile(info.ID+"-install", info.InstallSchema); err != nil {
				return nil, err
			}
			if err := e.install.check("config", emptyConfig); err != nil {
				return nil, fmt.Errorf("plugin: %s: its install schema refuses {}: %v", info.ID, err)
			}
		}
		h.byID[info.ID] = e
	}
	h.ids = slices.Sorted(maps.Keys(h.byID))
	recs, err := o.Records.PluginRecords(ctx)
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		if e := h.byID[r.ID]; e != nil { // a record of a plugin this binary lacks is kept, unserved
			e.rec = r
		}
	}
	ins, err := o.Records.PluginInstalls(ctx)
	if err != nil {
		return nil, err
	}
	for _, in := range ins {
		if e := h.byID[in.Plugin]; e != nil {
			e.installs[in.Namespace] = in
		}
	}
	for _, id := range h.ids {
		if e := h.byID[id]; e.rec.Enabled {
			h.apply(ctx, e, true, e.rec.Config)
		}
	}
	return h, nil
}

// apply tells e's plugin its config and records the outcome.
func (h *Host) apply(ctx context.Context, e *entry, enabled bool, config json.RawMessage) {
	msg := ""
	if err := e.p.Apply(ctx, enabled, config); err != nil {
		msg = err.Error()
	}
	h.mu.Lock()
	e.lastError = msg
	h.mu.Unlock()
}

func (h *Host) entry(id string) (*entry, error) {
	if e := h.byID[id]; e != nil {
		return e, nil
	}
	return nil, web.Errorf(http.StatusNotFound, "no plugin named %q", id)
}

// Plugins returns every plugin's view, by id.
func (h *Host) Plugins() []apitype.PluginView {
	out := make([]apitype.PluginView, 0, len(h.ids))
	for _, id := range h.ids {
		out = append(out, h.view(h.byID[id]))
	}
	return out
}

// Plugin returns one plugin's view; 404 for an unknown id.
func (h *Host) Plugin(id string) (apitype.PluginView, error) {
	e, err := h.entry(id)
	if err != nil {
		return apitype.PluginView{}, err
	}
	return h.view(e), nil
}

func (h *Host) view(e *entry) apitype.PluginView {
	status := e.p.Status()
	if status == nil {
		status = json.RawMessage(`null`)
	}
	per := e.info.PerNamespace()
	h.mu.RLock()
	defer h.mu.RUnlock()
	v := apitype.PluginView{
		ID: e.info.ID, Name: e.info.Name, Description: e.info.Description,
		ConfigSchema: e.info.ConfigSchema, Enabled: e.rec.Enabled, Config: e.rec.Config,
		UpdatedAt: e.rec.UpdatedAt, LastError: e.lastError, Status: status, PerNamespace: &per,
	}
	if per {
		v.InstalledIn = slices.Sorted(maps.Keys(e.installs))
	}
	return v
}

// Update is a change of a plugin's fleet-level record: PUT
// /api/plugins/{id}, or the enable and disable routes (Config nil).
type Update struct {
	Enabled bool
	// Config replaces the stored config when set; nil keeps it.
	Config json.RawMessage
	// Namespaces are the namespaces the fleet knows: switching a
	// per-namespace plugin on installs it in each that lacks it.
	Namespaces []string
}

// Set writes plugin id's record and applies it, returning the plugin's
// view. A config its schema refuses is a 400 naming the failing field
// ("config.url: ..."), and nothing is written.
func (h *Host) Set(ctx context.Context, id string, u Update) (apitype.PluginView, error) {
	e, err := h.entry(id)
	if err != nil {
		return apitype.PluginView{}, err
	}
	if u.Config != nil {
		if err := e.config.check("config", u.Config); err != nil {
			return apitype.PluginView{}, err
		}
	}
	h.write.Lock()
	defer h.write.Unlock()
	h.mu.RLock()
	rec, was := e.rec, e.rec.Enabled
	h.mu.RUnlock()
	rec.Enabled, rec.UpdatedAt = u.Enabled, h.now().Unix()
	changed := u.Config != nil && string(compact(u.Config)) != string(rec.Config)
	if u.Config != nil {
		rec.Config = compact(u.Config)
	}
	var add []store.PluginInstall
	if u.Enabled && !was && e.info.PerNamespace() {
		for _, ns := range u.Namespaces {
			add = append(add, store.PluginInstall{Plugin: id, Namespace: ns, InstalledAt: rec.UpdatedAt, Config: emptyConfig})
		}
	}
	if err := h.records.PutPluginRecord(ctx, rec, add); err != nil {
		return apitype.PluginView{}, &web.Error{Status: http.StatusInternalServerError, Message: "the plugin was not saved", Err: err}
	}
	h.mu.Lock()
	e.rec = rec
	for _, in := range add {
		if _, ok := e.installs[in.Namespace]; !ok {
			e.installs[in.Namespace] = in
		}
	}
	h.mu.Unlock()
	if u.Enabled != was || (u.Enabled && changed) {
		h.apply(ctx, e, u.Enabled, rec.Config)
	}
	return h.view(e), nil
}

// compact is raw without insignificant space; raw has been validated.
func compact(raw json.RawMessage) json.RawMessage {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return raw
	}
	return b.Bytes()
}

// Installs is GET /api/plugins/{id}/installs: 404 for an unknown plugin
// and for one that is not per-namespace.
func (h *Host) Installs(id string) (apitype.PluginInstalls, error) {
	e, err := h.entry(id)
	if err != nil {
		return apitype.PluginInstalls{}, err
	}
	if !e.info.PerNamespace() {
		return apitype.PluginInstalls{}, web.Errorf(http.StatusNotFound, "plugin %q is not installed per namespace", id)
	}
	h.mu.RLock()
	defer h.mu.RUnlock()
	out := apitype.PluginInstalls{Plugin: id, Enabled: e.rec.Enabled,
		Namespaces: slices.Sorted(maps.Keys(e.installs)), Installs: map[string]apitype.NamespaceInstall{}}
	for ns, in := range e.installs {
		ni := apitype.NamespaceInstall{InstalledAt: in.InstalledAt, Config: in.Config}
		if in.InstalledBy != "" {
			by := in.InstalledBy
			ni.InstalledBy = &by
		}
		out.Installs[ns] = ni
	}
	return out, nil
}

// ForNamespace returns every plugin as namespace ns sees it, by id.
func (h *Host) ForNamespace(ns string) []apitype.NamespacePlugin {
	out := make([]apitype.NamespacePlugin, 0, len(h.ids))
	for _, id := range h.ids {
		out = append(out, h.nsView(h.byID[id], ns))
	}
	return out
}

// InNamespace returns plugin id as namespace ns sees it; 404 for an
// unknown plugin. The caller has checked that it may see ns.
func (h *Host) InNamespace(ns, id string) (apitype.NamespacePlugin, error) {
	e, err := h.entry(id)
	if err != nil {
		return apitype.NamespacePlugin{}, err
	}
	return h.nsView(e, ns), nil
}

func (h *Host) nsView(e *entry, ns string) apitype.NamespacePlugin {
	h.mu.RLock()
	defer h.mu.RUnlock()
	v := apitype.NamespacePlugin{ID: e.info.ID, Name: e.info.Name, Description: e.info.Description, Enabled: e.rec.Enabled}
	if !e.info.PerNamespace() {
		v.Installed = e.rec.Enabled // a fleet-wide plugin is every namespace's once it is on
		return v
	}
	if in, ok := e.installs[ns]; ok {
		at := in.InstalledAt
		v.Installed, v.InstalledAt, v.InstalledBy, v.Config = true, &at, in.InstalledBy, in.Config
	}
	return v
}

// Install installs plugin id in namespace ns with config (nil: {}), on
// behalf of by (`token:<id>`, or "" for the operator), replacing an install
// there. Refused: a plugin that is not per-namespace (409), a disabled one
// (409 plugin_disabled), a config the install schema refuses (400).
func (h *Host) Install(ctx context.Context, ns, id, by string, config json.RawMessage) (apitype.NamespacePlugin, error) {
	e, err := h.entry(id)
	if err != nil {
		return apitype.NamespacePlugin{}, err
	}
	if !e.info.PerNamespace() {
		return apitype.NamespacePlugin{}, web.Errorf(http.StatusConflict, "plugin %q is not installed per namespace: it serves every namespace once the operator enables it", id)
	}
	if config == nil {
		config = emptyConfig
	}
	if err := e.install.check("config", config); err != nil {
		return apitype.NamespacePlugin{}, err
	}
	h.write.Lock()
	defer h.write.Unlock()
	h.mu.RLock()
	enabled := e.rec.Enabled
	h.mu.RUnlock()
	if !enabled {
		return apitype.NamespacePlugin{}, disabled(id)
	}
	in := store.PluginInstall{Plugin: id, Namespace: ns, InstalledAt: h.now().Unix(), InstalledBy: by, Config: compact(config)}
	if err := h.records.PutPluginInstall(ctx, in); err != nil {
		return apitype.NamespacePlugin{}, &web.Error{Status: http.StatusInternalServerError, Message: "the install was not saved", Err: err}
	}
	h.mu.Lock()
	e.installs[ns] = in
	h.mu.Unlock()
	return h.nsView(e, ns), nil
}

// Uninstall removes plugin id's install from namespace ns (none is no
// error) and returns the plugin as ns now sees it.
func (h *Host) Uninstall(ctx context.Context, ns, id string) (apitype.NamespacePlugin, error) {
	e, err := h.entry(id)
	if err != nil {
		return apitype.NamespacePlugin{}, err
	}
	if !e.info.PerNamespace() {
		return apitype.NamespacePlugin{}, web.Errorf(http.StatusConflict, "plugin %q is not installed per namespace: the operator disables it for the whole fleet", id)
	}
	h.write.Lock()
	defer h.write.Unlock()
	if err := h.records.DeletePluginInstall(ctx, id, ns); err != nil {
		return apitype.NamespacePlugin{}, &web.Error{Status: http.StatusInternalServerError, Message: "the install was not removed", Err: err}
	}
	h.mu.Lock()
	delete(e.installs, ns)
	h.mu.Unlock()
	return h.nsView(e, ns), nil
}

// NamespaceKnown installs every enabled per-namespace plugin in ns
// where it is not installed yet: a namespace new to the fleet (declared,
// or given its first deployment) gets them, as in app-lb.
func (h *Host) NamespaceKnown(ctx context.Context, ns string) error {
	h.write.Lock()
	defer h.write.Unlock()
	for _, id := range h.ids {
		e := h.byID[id]
		h.mu.RLock()
		_, has := e.installs[ns]
		want := e.info.PerNamespace() && e.rec.Enabled && !has
		rec := e.rec
		h.mu.RUnlock()
		if !want {
			continue
		}
		in := store.PluginInstall{Plugin: id, Namespace: ns, InstalledAt: h.now().Unix(), Config: emptyConfig}
		if err := h.records.PutPluginRecord(ctx, rec, []store.PluginInstall{in}); err != nil {
			return err
		}
		h.mu.Lock()
		e.installs[ns] = in
		h.mu.Unlock()
	}
	return nil
}

// NamespaceRemoved forgets every install in ns.
func (h *Host) NamespaceRemoved(ctx context.Context, ns string) error {
	h.write.Lock()
	defer h.write.Unlock()
	for _, id := range h.ids {
		e := h.byID[id]
		h.mu.RLock()
		_, has := e.installs[ns]
		h.mu.RUnlock()
		if !has {
			continue
		}
		if err := h.records.DeletePluginInstall(ctx, id, ns); err != nil {
			return err
		}
		h.mu.Lock()
		delete(e.installs, ns)
		h.mu.Unlock()
	}
	return nil
}

func disabled(id string) error {
	return &web.Error{Status: http.StatusConflict, Code: CodeDisabled,
		Message: fmt.Sprintf("plugin %q is disabled on this server; the operator enables it (POST /api/plugins/%s/enable)", id, id)}
}

// Serve dispatches r, a request of namespace ns to plugin id, with rest
// the path after /namespaces/{ns}/plugins/{id}/. The caller has checked
// its walls. 404 for an unknown plugin; 409 plugin_disabled when the
// operator has it off; 409 plugin_not_installed when ns has not installed
// a per-namespace plugin.
func (h *Host) Serve(w http.ResponseWriter, r *http.Request, ns, id, rest string) error {
	e, err := h.entry(id)
	if err != nil {
		return err
	}
	h.mu.RLock()
	enabled := e.rec.Enabled
	in, installed := e.installs[ns]
	h.mu.RUnlock()
	if !enabled {
		return disabled(id)
	}
	var config json.RawMessage
	if e.info.PerNamespace() {
		if !installed {
			return &web.Error{Status: http.StatusConflict, Code: CodeNotInstalled,
				Message: fmt.Sprintf("plugin %q is not installed in namespace %q (PUT /namespaces/%s/plugins/%s installs it)", id, ns, ns, id)}
		}
		config = in.Config
	}
	r2 := r.Clone(WithCall(r.Context(), ns, config))
	r2.URL.Path, r2.URL.RawPath = "/"+rest, ""
	e.p.ServeHTTP(w, r2)
	return nil
}
