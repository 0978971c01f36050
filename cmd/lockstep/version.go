package main

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"runtime/debug"
	"time"
)

// buildVersion is what lockstep version reports, read from the build
// information the go command stamps into the binary.
type buildVersion struct {
	// Module is the main module's path and Version its version: a
	// release ("v0.1.0") for a binary built by `go install ...@v0.1.0`, a
	// pseudo-version for one built at a commit (by go install ...@COMMIT,
	// or by go build in a git clone, with "+dirty" when it had
	// uncommitted changes), "(devel)" for one built without VCS
	// information.
	Module  string `json:"module"`
	Version string `json:"version"`
	// Revision, Time and Modified come from the version control system of
	// a checkout the binary was built in (go build stamps them; go install
	// ...@VERSION and go run do not). Revision and Time are "" when
	// unknown; Time is RFC 3339, UTC.
	Revision string `json:"revision"`
	Time     string `json:"time"`
	// Modified says that the checkout had uncommitted changes.
	Modified bool `json:"modified"`
	// Go is the Go version that built the binary, Platform the GOOS/GOARCH
	// it runs on.
	Go       string `json:"go"`
	Platform string `json:"platform"`
}

// describeBuild reads the build information of the running binary, as
// debug.ReadBuildInfo returns it. Without it (ok false: a binary built
// without module support) the module, version and revision are "". The Go
// version falls back to the running binary's.
func describeBuild(info *debug.BuildInfo, ok bool) buildVersion {
	v := buildVersion{Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if !ok || info == nil {
		return v
	}
	v.Module, v.Version = info.Main.Path, info.Main.Version
	if info.GoVersion != "" {
		v.Go = info.GoVersion
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			v.Time = s.Value
			if t, err := time.Parse(time.RFC3339Nano, s.Value); err == nil {
				v.Time = t.UTC().Format(time.RFC3339)
			}
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

func versionCommand(fs *flag.FlagSet) runner {
	return func(ctx context.Context, e *env, args []string) error {
		return e.printVersion(describeBuild(debug.ReadBuildInfo()))
	}
}

func (e *env) printVersion(v buildVersion) error {
	if e.opts.json {
		return e.writeJSON(v)
	}
	or := func(s, unknown string) string {
		if s == "" {
			return unknown
		}
		return s
	}
	revision := or(v.Revision, "unknown (not built in a checkout)")
	if v.Revision != "" && v.Modified {
		revision += " (modified: built with uncommitted changes)"
	}
	t := newTable(e.stdout)
	t.row("lockstep", or(v.Version, "unknown (built without module information)"))
	t.row("module", or(v.Module, "unknown"))
	t.row("revision", revision)
	t.row("time", or(v.Time, "unknown"))
	t.row("go", v.Go)
	t.row("platform", v.Platform)
	if err := t.flush(); err != nil {
		return fmt.Errorf("print version: %w", err)
	}
	return nil
}
