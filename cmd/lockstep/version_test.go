package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestDescribeBuild reads the build information of binaries built the
// three ways a user gets one: go install of a release, go build in a
// checkout (with and without uncommitted changes), and a build without
// module information.
func TestDescribeBuild(t *testing.T) {
	platform := runtime.GOOS + "/" + runtime.GOARCH
	tests := []struct {
		name     string
		info     *debug.BuildInfo
		ok       bool
		want     buildVersion
		wantText string
	}{
		{
			name: "go install of a release",
			info: &debug.BuildInfo{GoVersion: "go1.25.3", Path: "github.com/lockstepgo/lockstep/cmd/lockstep",
				Main:     debug.Module{Path: "github.com/lockstepgo/lockstep", Version: "v0.1.0"},
				Settings: []debug.BuildSetting{{Key: "CGO_ENABLED", Value: "1"}, {Key: "GOOS", Value: "linux"}}},
			ok:   true,
			want: buildVersion{Module: "github.com/lockstepgo/lockstep", Version: "v0.1.0", Go: "go1.25.3", Platform: platform},
			wantText: `lockstep  v0.1.0
module    github.com/lockstepgo/lockstep
revision  unknown (not built in a checkout)
time      unknown
go        go1.25.3
platform  ` + platform + "\n",
		},
		{
			name: "go build in a clean checkout",
			info: &debug.BuildInfo{GoVersion: "go1.26.8",
				Main: debug.Module{Path: "github.com/lockstepgo/lockstep", Version: "(devel)"},
				Settings: []debug.BuildSetting{{Key: "vcs", Value: "git"},
					{Key: "vcs.revision", Value: "62c99968c959e3f91918a5b1d094d0292162dccb"},
					{Key: "vcs.time", Value: "2026-12-02T00:28:12Z"}, {Key: "vcs.modified", Value: "false"}}},
			ok: true,
			want: buildVersion{Module: "github.com/lockstepgo/lockstep", Version: "(devel)",
				Revision: "62c99968c959e3f91918a5b1d094d0292162dccb", Time: "2026-12-02T00:28:12Z", Go: "go1.26.8", Platform: platform},
			wantText: `lockstep  (devel)
module    github.com/lockstepgo/lockstep
revision  62c99968c959e3f91918a5b1d094d0292162dccb
time      2026-12-02T00:28:12Z
go        go1.26.8
platform  ` + platform + "\n",
		},
		{
			name: "go build with uncommitted changes, a time with an offset",
			info: &debug.BuildInfo{GoVersion: "go1.26.8",
				Main: debug.Module{Path: "github.com/lockstepgo/lockstep", Version: "v0.1.1-0.20261202002812-62c99968c959+dirty"},
				Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "62c99968c959e3f91918a5b1d094d0292162dccb"},
					{Key: "vcs.time", Value: "2026-12-02T01:28:12.5+01:00"}, {Key: "vcs.modified", Value: "true"}}},
			ok: true,
			want: buildVersion{Module: "github.com/lockstepgo/lockstep", Version: "v0.1.1-0.20261202002812-62c99968c959+dirty",
				Revision: "62c99968c959e3f91918a5b1d094d0292162dccb", Time: "2026-12-02T00:28:12Z", Modified: true, Go: "go1.26.8", Platform: platform},
			wantText: `lockstep  v0.1.1-0.20261202002812-62c99968c959+dirty
module    github.com/lockstepgo/lockstep
revision  62c99968c959e3f91918a5b1d094d0292162dccb (modified: built with uncommitted changes)
time      2026-12-02T00:28:12Z
go        go1.26.8
platform  ` + platform + "\n",
		},
		{
			name: "no build information",
			ok:   false,
			want: buildVersion{Go: runtime.Version(), Platform: platform},
			wantText: `lockstep  unknown (built without module information)
module    unknown
revision  unknown (not built in a checkout)
time      unknown
go        ` + runtime.Version() + `
platform  ` + platform + "\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := describeBuild(tt.info, tt.ok)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Fatalf("describeBuild (-want +got):\n%s", diff)
			}
			var text, js bytes.Buffer
			if err := (&env{stdout: &text}).printVersion(got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.wantText, text.String()); diff != "" {
				t.Errorf("text output (-want +got):\n%s", diff)
			}
			if err := (&env{stdout: &js, opts: options{json: true}}).printVersion(got); err != nil {
				t.Fatal(err)
			}
			var back buildVersion
			if err := json.Unmarshal(js.Bytes(), &back); err != nil {
				t.Fatalf("JSON output %s: %v", js.String(), err)
			}
			if diff := cmp.Diff(got, back); diff != "" {
				t.Errorf("JSON output does not round-trip (-want +got):\n%s", diff)
			}
		})
	}
}

// TestVersionCommand runs lockstep version in process: it reads this test
// binary's build information, needs no database, and takes no arguments.
func TestVersionCommand(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "none.db")
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"--db", db, "version", "--json"}, &out, &errb, time.Now); code != exitOK {
		t.Fatalf("version --json: exit %d, stderr %q", code, errb.String())
	}
	var got buildVersion
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("version --json printed %q: %v", out.String(), err)
	}
	if got.Module != "github.com/lockstepgo/lockstep" || got.Go != runtime.Version() {
		t.Errorf("version --json = %+v, want module github.com/lockstepgo/lockstep and go %s", got, runtime.Version())
	}
	if matches, _ := filepath.Glob(filepath.Join(dir, "*")); len(matches) != 0 {
		t.Errorf("version created %v", matches)
	}
	out.Reset()
	errb.Reset()
	if code := run(context.Background(), []string{"version", "extra"}, &out, &errb, time.Now); code != exitUsage {
		t.Errorf("version extra: exit %d, want %d (usage); stderr %q", code, exitUsage, errb.String())
	}
}

// TestVersionBinary builds lockstep and checks that lockstep version says
// what `go version -m` reads from the same binary: module, version, VCS
// revision, time and modified flag (present when the binary was built in
// a git clone), and Go version.
func TestVersionBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build lockstep: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "lockstep")
	// -buildvcs=auto (overriding a GOFLAGS that turns it off): stamped in a
	// git clone, not in a worktree or an exported tree.
	if out, err := exec.Command(gobin, "build", "-buildvcs=auto", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version", "--json").Output()
	if err != nil {
		t.Fatalf("lockstep version --json: %v", err)
	}
	var got buildVersion
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("lockstep version --json printed %q: %v", out, err)
	}

	m, err := exec.Command(gobin, "version", "-m", bin).Output()
	if err != nil {
		t.Fatalf("go version -m: %v", err)
	}
	want := buildVersion{Platform: runtime.GOOS + "/" + runtime.GOARCH}
	sc := bufio.NewScanner(bytes.NewReader(m))
	for sc.Scan() {
		f := strings.Split(strings.TrimSpace(sc.Text()), "\t")
		switch {
		case len(f) >= 3 && f[0] == "mod":
			want.Module, want.Version = f[1], f[2]
		case len(f) == 2 && f[0] == "build":
			k, v, _ := strings.Cut(f[1], "=")
			switch k {
			case "vcs.revision":
				want.Revision = v
			case "vcs.time":
				want.Time = v
			case "vcs.modified":
				want.Modified = v == "true"
			}
		}
	}
	if first, _, _ := strings.Cut(string(m), "\n"); strings.Contains(first, ": ") {
		want.Go = strings.TrimSpace(first[strings.LastIndex(first, ": ")+2:])
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("lockstep version --json against go version -m (-go version +lockstep version):\n%s", diff)
	}
	if got.Revision == "" {
		t.Logf("no VCS information in the binary (built outside a git clone, or git missing): revision and time unchecked")
	}
}
