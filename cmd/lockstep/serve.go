package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os/user"
	"strings"
	"sync"
	"time"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/approval/reviewweb"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/postgres"
)

// backend is a lockstep database that serve runs the inbox on: the
// checkpoint saver it reads and the approval store it records decisions
// in.
type backend struct {
	saver checkpoint.Saver
	store approval.Store
	close func() error
}

// backendOpener opens the database that --db names, when it recognises
// the name.
type backendOpener struct {
	name  string
	match func(db string) bool
	open  func(ctx context.Context, e *env) (*backend, error)
}

// backends are the kinds of database serve opens, tried in order. A new
// backend (a Postgres URL) is one more entry here.
func backends() []backendOpener {
	return []backendOpener{
		{name: "sqlite", match: func(db string) bool { return !strings.Contains(db, "://") }, open: openSQLiteBackend},
		{name: "postgres", match: postgres.IsURL, open: openPostgresBackend},
	}
}

// openBackend opens --db with the first backend that recognises it. A URL
// no backend takes is a usage error naming its scheme.
func (e *env) openBackend(ctx context.Context) (*backend, error) {
	for _, b := range backends() {
		if b.match(e.opts.db) {
			return b.open(ctx, e)
		}
	}
	scheme, _, _ := strings.Cut(e.opts.db, "://")
	return nil, usageError(fmt.Sprintf("--db %s: this lockstep cannot open %s databases", quote(scheme+"://…"), quote(scheme)),
		"pass the path of a lockstep SQLite file or a postgres:// URL")
}

// openSQLiteBackend opens a SQLite file as the other commands do: never
// creating or migrating a file that is not a lockstep database of this
// version. The approval tables, like lockstep approve's, are created only
// when the first decision is recorded.
func openSQLiteBackend(ctx context.Context, e *env) (*backend, error) {
	s, err := e.openSaver(true)
	if err != nil {
		return nil, err
	}
	return &backend{saver: s, store: &lazyStore{e: e, s: s}, close: s.Close}, nil
}

// openPostgresBackend opens a PostgreSQL database as the other commands
// do (postgres.OpenExisting: nothing created or migrated); its approval
// tables always exist.
func openPostgresBackend(ctx context.Context, e *env) (*backend, error) {
	s, err := e.openSaver(true)
	if err != nil {
		return nil, err
	}
	p := s.(pgDatabase)
	return &backend{saver: p, store: p.db.Approvals(), close: p.Close}, nil
}

// lazyStore is the approval store of a SQLite database whose approval
// tables may not exist yet: it reads nothing until they do, and creates
// them for the first decision that passes the rules (a refused one
// writes nothing).
type lazyStore struct {
	e  *env
	s  database
	mu sync.Mutex
	st approval.Store // the SQL store, once its tables exist
}

// current returns the SQL store when the tables exist (created by now,
// perhaps by another process), else an empty store for reading.
func (l *lazyStore) current(ctx context.Context) (approval.Store, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.st != nil {
		return l.st, nil
	}
	st, _, err := l.e.readDecisions(ctx, l.s)
	if err != nil {
		return nil, err
	}
	if _, ok := st.(*approval.SQLStore); ok {
		l.st = st
	}
	return st, nil
}

func (l *lazyStore) Decide(ctx context.Context, item approval.Item, v approval.Verdict) (approval.Decision, error) {
	// Check the verdict by the same rules with nothing recorded, so that
	// a refused one does not create the approval tables. An expiry is the
	// exception: seeing a request expired records the expiry.
	if _, err := approval.NewMemoryStore(l.e.now).Decide(ctx, item, v); err != nil && !errors.Is(err, approval.ErrExpired) {
		return approval.Decision{}, err
	}
	l.mu.Lock()
	if l.st == nil {
		st, err := l.e.writeDecisions(ctx, l.s)
		if err != nil {
			l.mu.Unlock()
			return approval.Decision{}, err
		}
		l.st = st
	}
	st := l.st
	l.mu.Unlock()
	return st.Decide(ctx, item, v)
}

func (l *lazyStore) Get(ctx context.Context, id string) (approval.Record, error) {
	st, err := l.current(ctx)
	if err != nil {
		return approval.Record{}, err
	}
	return st.Get(ctx, id)
}

func (l *lazyStore) Decided(ctx context.Context, ids []string) (map[string]bool, error) {
	st, err := l.current(ctx)
	if err != nil {
		return nil, err
	}
	return st.Decided(ctx, ids)
}

func (l *lazyStore) Unresumed(ctx context.Context, limit int) ([]approval.Record, error) {
	st, err := l.current(ctx)
	if err != nil {
		return nil, err
	}
	return st.Unresumed(ctx, limit)
}

func (l *lazyStore) ClaimResume(ctx context.Context, id string, lease time.Duration) (bool, error) {
	st, err := l.current(ctx)
	if err != nil {
		return false, err
	}
	return st.ClaimResume(ctx, id, lease)
}

func (l *lazyStore) FinishResume(ctx context.Context, id, note string) error {
	st, err := l.current(ctx)
	if err != nil {
		return err
	}
	return st.FinishResume(ctx, id, note)
}

func (l *lazyStore) RetryResume(ctx context.Context, id, reason string, after time.Duration) error {
	st, err := l.current(ctx)
	if err != nil {
		return err
	}
	return st.RetryResume(ctx, id, reason, after)
}

// Now reads the command's clock, the one both stores are opened with.
func (l *lazyStore) Now() time.Time { return l.e.now() }

func (l *lazyStore) Audit(ctx context.Context, id string) (approval.Trail, error) {
	st, err := l.current(ctx)
	if err != nil {
		return approval.Trail{}, err
	}
	return st.Audit(ctx, id)
}

func (l *lazyStore) RecordOutcome(ctx context.Context, id string, ex approval.Execution) error {
	st, err := l.current(ctx)
	if err != nil {
		return err
	}
	return st.RecordOutcome(ctx, id, ex)
}

// serveCommand runs the reviewers' web inbox on the database until the
// context ends (Ctrl-C), printing its URL with a one-time login token.
func serveCommand(fs *flag.FlagSet) runner {
	addr := fs.String("addr", "127.0.0.1:8080", "listen on `HOST:PORT` (keep it on loopback: the login is for local use)")
	reviewer := fs.String("reviewer", "", "the `NAME` recorded with the decisions made in the browser (default: your user name)")
	return func(ctx context.Context, e *env, _ []string) error {
		name := strings.TrimSpace(*reviewer)
		if name == "" {
			if u, err := user.Current(); err == nil {
				name = u.Username
			}
		}
		if name == "" {
			return usageError("serve needs --reviewer NAME", "a decision records who made it")
		}
		if err := approval.CheckReviewer(name); err != nil {
			return usageError(fmt.Sprintf("--reviewer %s cannot identify a reviewer: %v", quote(name), err), "pass a plain name such as --reviewer alice")
		}
		b, err := e.openBackend(ctx)
		if err != nil {
			return err
		}
		defer b.close()
		lt, err := reviewweb.NewLocalToken(reviewweb.LocalTokenOptions{Now: e.now})
		if err != nil {
			return err
		}
		tok, err := lt.Issue(name)
		if err != nil {
			return err
		}
		// The graphs are drawn from the topologies stored in the database
		// (an older file that has none shows what the checkpoints show).
		h, err := reviewweb.New(reviewweb.Options{Saver: b.saver, Store: b.store, Auth: lt, Policy: reviewweb.AnyReviewer(), Now: e.now,
			Graph: reviewweb.StoredGraph(b.saver)})
		if err != nil {
			return err
		}
		defer h.Close()
		ln, err := net.Listen("tcp", *addr)
		if err != nil {
			return usageError(fmt.Sprintf("serve: cannot listen on %s: %v", quote(*addr), err), "pass another --addr HOST:PORT")
		}
		base := "http://" + ln.Addr().String()
		if host, _, _ := net.SplitHostPort(ln.Addr().String()); !net.ParseIP(host).IsLoopback() {
			fmt.Fprintf(e.stderr, "lockstep: warning: serving on %s, not loopback: the session cookie travels over plain HTTP; put a TLS proxy in front\n", ln.Addr())
		}
		fmt.Fprintf(e.stdout, "lockstep approvals for %s on %s\n", e.dbName(), base)
		fmt.Fprintf(e.stdout, "open %s/login?token=%s\n", base, url.QueryEscape(tok))
		fmt.Fprintf(e.stdout, "login token (works once, for one hour, signs in as %s): %s\n", name, tok)
		fmt.Fprintf(e.stdout, "decisions are recorded only: a process running approval.Worker with the graph resumes the threads. Ctrl-C stops.\n")
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, IdleTimeout: 2 * time.Minute}
		errc := make(chan error, 1)
		go func() { errc <- srv.Serve(ln) }()
		select {
		case err := <-errc:
			return fmt.Errorf("serve: %w", err)
		case <-ctx.Done():
		}
		h.Close() // ends the event streams, which Shutdown would wait for
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("serve: shut down: %w", err)
		}
		<-errc
		return nil
	}
}
