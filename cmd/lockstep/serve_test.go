package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a buffer the serving goroutine writes while the test
// reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// serving runs lockstep serve on db until the returned stop is called,
// and returns the login URL it printed.
func serving(t *testing.T, db string, args ...string) (login string, stop func() (int, string)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, append([]string{"--db", db, "serve", "--addr", "127.0.0.1:0"}, args...), &out, &errb, cliNow)
	}()
	re := regexp.MustCompile(`open (http://\S+/login\?token=\S+)`)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			login = m[1]
			break
		}
		select {
		case code := <-done:
			cancel()
			t.Fatalf("serve exited %d before serving:\n%s%s", code, out.String(), errb.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("serve printed no login URL:\n%s", out.String())
		}
	}
	return login, func() (int, string) {
		cancel()
		return <-done, errb.String()
	}
}

func tables(t *testing.T, db string) string {
	t.Helper()
	d, err := sql.Open("sqlite3", "file:"+db+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	rows, err := d.Query(`SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		rows.Scan(&n)
		names = append(names, n)
	}
	return strings.Join(names, " ")
}

// TestServe: lockstep serve prints a one-time login; the browser it signs
// in lists the pending approvals and approves one, which lockstep
// approvals then no longer lists; reading alone creates no tables; Ctrl-C
// stops it with exit 0.
func TestServe(t *testing.T) {
	f := buildFixture(t)
	db := f.copyDB(t)
	before := tables(t, db)
	login, stop := serving(t, db, "--reviewer", "priya")
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	get := func(u string) (int, string) {
		t.Helper()
		resp, err := c.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	base := login[:strings.Index(login, "/login")]
	if code, body := get(base + "/api/v1/approvals"); code != 401 {
		t.Fatalf("before sign-in: %d %s", code, body)
	}
	if code, body := get(login); code != 200 || !strings.Contains(body, f.refundID) || !strings.Contains(body, f.emailID) {
		t.Fatalf("after sign-in: %d\n%.2000s", code, body)
	}
	if code, _ := get(login); code != 401 {
		t.Errorf("the login token worked twice (%d)", code)
	}
	if got := tables(t, db); got != before {
		t.Errorf("reading created tables: %s, was %s", got, before)
	}
	code, body := get(base + "/api/v1/session")
	var sess struct {
		Reviewer string
		CSRF     string `json:"csrf_token"`
	}
	json.Unmarshal([]byte(body), &sess)
	if code != 200 || sess.Reviewer != "priya" {
		t.Fatalf("session: %d %s", code, body)
	}
	// The approval's graph is the one the thread was saved under, read
	// from the database's topologies (the whole graph: execute's edge to
	// END too, which the waiting thread never took).
	code, body = get(base + "/api/v1/approvals/" + f.refundID)
	var view struct {
		ThreadView struct {
			Graph struct {
				Nodes []string
				Edges []struct{ From, To string }
			}
			FromRuns bool `json:"graph_from_checkpoints"`
		} `json:"thread_view"`
	}
	json.Unmarshal([]byte(body), &view)
	if g := view.ThreadView.Graph; code != 200 || view.ThreadView.FromRuns || strings.Join(g.Nodes, " ") != "execute plan" ||
		!slices.Contains(g.Edges, struct{ From, To string }{"execute", "__end__"}) {
		t.Errorf("the approval's graph: %d %+v, want the stored graph plan → execute → END", code, view.ThreadView)
	}
	req, _ := http.NewRequest("POST", base+"/api/v1/approvals/"+f.refundID+"/decision", strings.NewReader(`{"outcome":"approved","note":"from the browser"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-CSRF-Token", sess.CSRF)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("approve: %d %s", resp.StatusCode, b)
	}
	if got := cli(db, cliNow(), "approvals"); strings.Contains(got.stdout, f.refundID) || !strings.Contains(got.stdout, f.emailID) {
		t.Errorf("lockstep approvals after the web approval:\n%s", got.stdout)
	}
	if got := cli(db, cliNow(), "approve", f.refundID, "--reviewer", "bob"); got.code != exitRefused || !strings.Contains(got.stderr, `already approved by "priya"`) {
		t.Errorf("the CLI after the web approval: %+v", got)
	}
	if code, errs := stop(); code != exitOK {
		t.Errorf("serve exited %d: %s", code, errs)
	}
}

// TestServeRefusals: serve keeps the CLI's rule of never creating or
// changing a file that is not a lockstep database, and says what it
// cannot open.
func TestServeRefusals(t *testing.T) {
	dir := t.TempDir()
	notDB := filepath.Join(dir, "notes.txt")
	os.WriteFile(notDB, []byte("not a database\n"), 0o600)
	appDB := filepath.Join(t.TempDir(), "app.db")
	d, err := sql.Open("sqlite3", appDB)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Exec("CREATE TABLE orders (id INTEGER PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	d.Close()
	appBytes, _ := os.ReadFile(appDB)
	missing := filepath.Join(dir, "missing.db")
	for _, tc := range []struct {
		db   string
		args []string
		code int
		want string
	}{
		{missing, nil, exitInternal, "no database at " + missing},
		{notDB, nil, exitInternal, "is not a SQLite database"},
		{appDB, nil, exitInternal, "is not a lockstep database"},
		{"mysql://localhost/lockstep", nil, exitUsage, `cannot open "mysql" databases`},
		{missing, []string{"--reviewer", "system:me"}, exitUsage, "cannot identify a reviewer"},
		{missing, []string{"extra"}, exitUsage, "unexpected argument"},
	} {
		got := cli(tc.db, cliNow(), append([]string{"serve", "--addr", "127.0.0.1:0"}, tc.args...)...)
		if got.code != tc.code || !strings.Contains(got.stderr, tc.want) {
			t.Errorf("serve --db %s %v: exit %d %q; want %d with %q", tc.db, tc.args, got.code, got.stderr, tc.code, tc.want)
		}
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Errorf("serve created %s", missing)
	}
	if b, _ := os.ReadFile(appDB); !bytes.Equal(b, appBytes) {
		t.Error("serve changed another program's database")
	}
}
