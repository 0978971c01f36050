// Command fleet is lockstep's fleet demo: several worker processes
// (package workers) share one Postgres database and its hotel bookings.
// A third of the bookings wait on an approval, which the demo gives with
// the lockstep CLI (lockstep --db postgres://... approve ID); while they
// run, one worker is killed (SIGKILL) at random, and the others take over
// its threads once its leases lapse. At the end it prints each booking's
// reservation and that every booking happened exactly once.
//
//	eval "$(.ci/postgres.sh start /tmp/lockstep-pg)"   # a local throwaway Postgres
//	go build -o /tmp/lockstep ./cmd/lockstep
//	go run ./examples/fleet --db "$LOCKSTEP_POSTGRES_URL" --lockstep /tmp/lockstep
//
// The tables go in the schema LOCKSTEP_POSTGRES_SCHEMA names (default
// lockstep), as the CLI's do; the hotel's reservations in its table
// fleet_reservations. Exit codes: 0 every booking once, 1 a failure (or a
// booking missing or made twice), 2 usage.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/interrupt"
	"github.com/lockstepgo/lockstep/nodes/ledger"
	"github.com/lockstepgo/lockstep/postgres"
	"github.com/lockstepgo/lockstep/workers"
)

// The environment of a worker process (the demo re-executed).
const (
	envWorker = "LOCKSTEP_FLEET_WORKER" // the worker's number
	envDB     = "LOCKSTEP_FLEET_DB"
)

// lease is the workers' lease: a killed worker's threads are taken over
// within it.
const lease = 2 * time.Second

// State is a booking thread's state.
type State struct {
	Guest        string
	Hotel        string
	Gated        bool // the booking waits on an approval
	Decision     string
	Confirmation string
	Log          []string `lockstep:"append"`
}

// schema is the Postgres schema of the demo's tables, as the CLI reads it.
func schema() string {
	if s := os.Getenv("LOCKSTEP_POSTGRES_SCHEMA"); s != "" {
		return s
	}
	return "lockstep"
}

// open opens the demo's database.
func open(ctx context.Context, url string, conns int32) (*postgres.DB, error) {
	return postgres.Open(ctx, url, postgres.Config{Schema: schema(), MaxConns: conns})
}

// reservations is the hotel's table, in the demo's schema: one row per
// reservation the hotel made (no constraint stops a second one: the
// ledger does).
func reservations(db *postgres.DB) string { return `"` + db.Schema() + `".fleet_reservations` }

// bookGraph is the booking graph: quote, book (the approval first when
// gated; the reservation once, through the ledger), confirm.
func bookGraph(db *postgres.DB, worker string) *graph.Graph[State] {
	step := func(name string) graph.NodeFunc[State] {
		return func(ctx context.Context, s State) (graph.Update[State], error) {
			time.Sleep(100 * time.Millisecond) // a stand-in for a call
			return graph.Set(State{Log: []string{name + "@" + worker}}, "Log"), nil
		}
	}
	book := func(ctx context.Context, s State) (graph.Update[State], error) {
		out, fields := State{Log: []string{"book@" + worker}}, []string{"Log", "Confirmation"}
		info, _ := graph.TaskFrom(ctx)
		if s.Gated {
			dec, err := interrupt.Ask[approval.Decision](ctx, request(info.Thread, s))
			if err != nil {
				return graph.Update[State]{}, err
			}
			out.Decision, fields = string(dec.Outcome), append(fields, "Decision")
			if dec.Outcome != approval.Approved {
				return graph.Set(out, fields...), nil
			}
		}
		c, err := reserveOnce(ctx, db, info, worker)
		if err != nil {
			return graph.Update[State]{}, err
		}
		out.Confirmation = c
		return graph.Set(out, fields...), nil
	}
	return graph.New[State]().
		AddNode("quote", step("quote")).AddNode("book", book).AddNode("confirm", step("confirm")).
		AddEdge(graph.START, "quote").AddEdge("quote", "book").AddEdge("book", "confirm")
}

// request is the approval a gated booking asks for.
func request(thread string, s State) approval.Request {
	args := []byte(fmt.Sprintf(`{"guest":%q,"hotel":%q}`, s.Guest, s.Hotel))
	h, _ := approval.ArgsHash("book", args)
	now := time.Now()
	return approval.Request{Type: approval.RequestType, Tool: "book", Args: args, ArgsHash: h, CallID: "book-" + thread,
		Rationale: "a suite is above the desk's limit", Risk: approval.RiskHigh, Owner: "front-desk", CreatedAt: now, ExpiresAt: now.Add(24 * time.Hour)}
}

// reserveOnce makes the booking's reservation once: the ledger's intent
// before the hotel's write, the outcome after; an intent a killed worker
// left is reconciled against the hotel's own table.
func reserveOnce(ctx context.Context, db *postgres.DB, info graph.TaskInfo, worker string) (string, error) {
	led := db.Ledger() // fenced by the thread's lease (D17)
	// The intent commits only while this run holds the thread's lease,
	// which it must then hold in the saver (a new thread's first step has
	// not written yet).
	if err := graph.OwnThread(ctx); err != nil {
		return "", err
	}
	key := "book:" + info.Thread
	in := ledger.Intent{Key: key, Tool: "book", ArgsHash: "h-" + info.Thread, Owner: worker + "/" + info.Run, Lease: time.Minute, Thread: info.Thread, Run: info.Run}
	e, started, err := led.Begin(ctx, in)
	if errors.Is(err, ledger.ErrOutcomeUnknown) {
		var id int64 // 0: the hotel made none
		if err := db.Pool().QueryRow(ctx, `SELECT coalesce(min(id), 0) FROM `+reservations(db)+` WHERE booking = $1`, info.Thread).Scan(&id); err != nil {
			return "", err
		}
		if id != 0 {
			c := confirmation(id)
			if err := led.Resolve(ctx, key, ledger.Outcome{Result: []byte(strconv.Quote(c))}); err != nil && !errors.Is(err, ledger.ErrNotHeld) {
				return "", err
			}
			return c, nil
		}
		in.TakeOver = true
		e, started, err = led.Begin(ctx, in)
	}
	if err != nil {
		return "", err
	}
	if !started {
		c, err := strconv.Unquote(string(e.Outcome.Result))
		return c, err
	}
	var id int64
	if err := db.Pool().QueryRow(ctx, `INSERT INTO `+reservations(db)+` (booking, worker) VALUES ($1, $2) RETURNING id`, info.Thread, worker).Scan(&id); err != nil {
		return "", err
	}
	c := confirmation(id)
	if err := led.Complete(ctx, key, in.Owner, ledger.Outcome{Result: []byte(strconv.Quote(c))}); err != nil {
		return "", err
	}
	return c, nil
}

func confirmation(id int64) string { return fmt.Sprintf("HB-%04d", id) }

// compile compiles the booking graph as every process does.
func compile(db *postgres.DB, worker string) (*graph.Runnable[State], error) {
	// The worker's name is its runner's: a worker run again under it takes
	// back at once the threads its killed predecessor left leased.
	return bookGraph(db, worker).Compile(graph.WithSaver(db.Saver()), graph.WithRunner(worker), graph.WithLeaseTTL(lease))
}

// workerMain is a worker process: a pool on the database, resuming
// decided approvals too, until its standard input closes or SIGTERM.
func workerMain() int {
	name := "worker-" + os.Getenv(envWorker)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	db, err := open(ctx, os.Getenv(envDB), 8)
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		return 1
	}
	defer db.Close()
	r, err := compile(db, name)
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		return 1
	}
	pool, err := workers.New(r, workers.Options{Concurrency: 4, Poll: 100 * time.Millisecond, Approvals: db.Approvals(),
		Approval: approval.WorkerOptions{Name: name}})
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		return 1
	}
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin) // until the demo closes it
		stop()
	}()
	if err := pool.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, name+":", err)
		return 1
	}
	return 0
}

// config is what the flags say.
type config struct {
	db       string
	workers  int
	bookings int
	cli      string
	seed     uint64
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("fleet", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := config{}
	fs.StringVar(&c.db, "db", os.Getenv("LOCKSTEP_POSTGRES_URL"), "the Postgres `URL` (default $LOCKSTEP_POSTGRES_URL)")
	fs.IntVar(&c.workers, "workers", 3, "how many worker `processes`")
	fs.IntVar(&c.bookings, "bookings", 12, "how many `bookings`")
	fs.StringVar(&c.cli, "lockstep", "lockstep", "the lockstep CLI `binary` the demo approves with")
	fs.Uint64Var(&c.seed, "seed", 0, "which worker dies (0: a random one)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	switch {
	case fs.NArg() > 0:
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case !postgres.IsURL(c.db):
		return c, errors.New("--db wants a postgres:// URL (eval \"$(.ci/postgres.sh start /tmp/lockstep-pg)\" starts a local one)")
	case c.workers < 2:
		return c, errors.New("--workers wants 2 or more: one of them is killed")
	case c.bookings < 1:
		return c, errors.New("--bookings wants 1 or more")
	}
	if c.seed == 0 {
		c.seed = mrand.Uint64()
	}
	return c, nil
}

// run is main without the exit: it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c, err := parseFlags(args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, "fleet:", err)
		}
		return 2
	}
	if err := demo(ctx, c, stdout); err != nil {
		fmt.Fprintln(stderr, "fleet:", err)
		return 1
	}
	return 0
}

// proc is a worker process.
type proc struct {
	n     int
	cmd   *exec.Cmd
	stdin io.Closer
	done  chan error
}

func demo(ctx context.Context, c config, out io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	db, err := open(ctx, c.db, 4)
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.Pool().Exec(ctx, `CREATE TABLE IF NOT EXISTS `+reservations(db)+` (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, booking text NOT NULL, worker text NOT NULL, made_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return err
	}
	r, err := compile(db, "demo")
	if err != nil {
		return err
	}
	feeder, err := workers.New(r, workers.Options{})
	if err != nil {
		return err
	}
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	threads := make([]string, c.bookings)
	hotels := []string{"Hotel Lumen", "Harbour Inn", "Alpine Lodge"}
	for i := range threads {
		threads[i] = fmt.Sprintf("booking-%s-%02d", run, i)
		s := State{Guest: fmt.Sprintf("guest %d", i+1), Hotel: hotels[i%len(hotels)], Gated: i%3 == 1}
		if _, err := feeder.Enqueue(ctx, threads[i], graph.Set(s, "Guest", "Hotel", "Gated"), workers.RunKey("book")); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "queued %d bookings (%d wait on an approval) in schema %s\n", c.bookings, (c.bookings+1)/3, db.Schema())

	exe, err := os.Executable()
	if err != nil {
		return err
	}
	procs := make([]*proc, c.workers)
	for i := range procs {
		cmd := exec.Command(exe)
		if strings.HasSuffix(exe, ".test") {
			cmd.Args = append(cmd.Args, "-test.run=^$")
		}
		cmd.Env = append(os.Environ(), envWorker+"="+strconv.Itoa(i+1), envDB+"="+c.db)
		cmd.Stdout, cmd.Stderr = io.Discard, os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return err
		}
		p := &proc{n: i + 1, cmd: cmd, stdin: stdin, done: make(chan error, 1)}
		go func() { p.done <- cmd.Wait() }()
		procs[i] = p
	}
	defer func() {
		for _, p := range procs {
			p.stdin.Close()
			select {
			case <-p.done:
			case <-time.After(30 * time.Second):
				_ = p.cmd.Process.Kill()
				<-p.done
			}
		}
	}()
	fmt.Fprintf(out, "started %d worker processes\n", c.workers)

	rnd := mrand.New(mrand.NewPCG(c.seed, 0))
	victim := procs[rnd.IntN(len(procs))]
	// The kill comes while the victim's bookings are in flight.
	killed := make(chan struct{})
	go func() {
		defer close(killed)
		select {
		case <-time.After(time.Duration(150+rnd.IntN(300)) * time.Millisecond):
		case <-ctx.Done():
			return
		}
		_ = victim.cmd.Process.Signal(syscall.SIGKILL)
		err := <-victim.done
		victim.done <- err // for the cleanup
	}()
	told := false
	approved := map[string]bool{}
	inbox := approval.NewInbox(db.Saver(), db.Approvals())
	deadline := time.Now().Add(5 * time.Minute)
	for {
		var done, waiting int
		for _, th := range threads {
			snap, err := r.GetState(ctx, th)
			if err != nil && !errors.Is(err, graph.ErrThreadNotFound) {
				return err
			}
			switch snap.Status {
			case graph.StatusDone:
				done++
			case graph.StatusWaiting:
				waiting++
			}
		}
		select {
		case <-killed:
			if !told {
				told = true
				fmt.Fprintf(out, "killed worker-%d (SIGKILL, pid %d) mid-run (now %d bookings done, %d waiting on an approval): the others take its threads over once its leases lapse\n",
					victim.n, victim.cmd.Process.Pid, done, waiting)
			}
		default:
		}
		if done == len(threads) && told {
			break
		}
		if err := approveAll(ctx, c, db, inbox, approved, out); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d bookings done after 5 minutes", done, len(threads))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return report(ctx, db, r, threads, len(approved), victim.n, out)
}

// approveAll approves every pending approval of the demo with the lockstep
// CLI, once each.
func approveAll(ctx context.Context, c config, db *postgres.DB, inbox *approval.Inbox, approved map[string]bool, out io.Writer) error {
	page, err := inbox.List(ctx, approval.Filter{Limit: approval.MaxPageSize})
	if err != nil {
		return err
	}
	for _, it := range page.Items {
		if approved[it.ID] {
			continue
		}
		cmd := exec.CommandContext(ctx, c.cli, "--db", c.db, "approve", it.ID, "--reviewer", "front-desk", "--note", "suite approved")
		cmd.Env = append(os.Environ(), "LOCKSTEP_POSTGRES_SCHEMA="+db.Schema())
		b, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("lockstep approve %s: %v: %s", it.ID, err, bytesLine(b))
		}
		approved[it.ID] = true
		fmt.Fprintf(out, "approved %s with: lockstep --db postgres://... approve %s --reviewer front-desk\n", it.Thread, it.ID)
	}
	return nil
}

func bytesLine(b []byte) string {
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return strings.Join(lines, "; ")
}

// report prints each booking and checks that each happened exactly once.
func report(ctx context.Context, db *postgres.DB, r *graph.Runnable[State], threads []string, approved, victim int, out io.Writer) error {
	made := map[string][]string{} // booking -> its reservations' confirmations
	rows, err := db.Pool().Query(ctx, `SELECT booking, id FROM `+reservations(db)+` WHERE booking = ANY($1) ORDER BY id`, threads)
	if err != nil {
		return err
	}
	for rows.Next() {
		var b string
		var id int64
		if err := rows.Scan(&b, &id); err != nil {
			rows.Close()
			return err
		}
		made[b] = append(made[b], confirmation(id))
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	var problems []string
	for _, th := range threads {
		snap, err := r.GetState(ctx, th)
		if err != nil {
			return err
		}
		s := snap.Values
		gate := ""
		if s.Gated {
			gate = " (approved)"
		}
		fmt.Fprintf(out, "%s  %-12s %-12s %s%s  steps %s\n", th, s.Guest, s.Hotel, s.Confirmation, gate, strings.Join(s.Log, " "))
		switch n := len(made[th]); {
		case snap.Status != graph.StatusDone:
			problems = append(problems, fmt.Sprintf("%s is %s, not done", th, snap.Status))
		case n != 1:
			problems = append(problems, fmt.Sprintf("%s has %d reservations at the hotel: %v", th, n, made[th]))
		case made[th][0] != s.Confirmation:
			problems = append(problems, fmt.Sprintf("%s confirms %s, the hotel made %s", th, s.Confirmation, made[th][0]))
		}
	}
	if len(problems) > 0 {
		return errors.New("not exactly once:\n" + strings.Join(problems, "\n"))
	}
	fmt.Fprintf(out, "every booking happened exactly once: %d bookings, %d reservations at the hotel, none twice; %d approved with lockstep approve; worker-%d was killed mid-run\n",
		len(threads), len(threads), approved, victim)
	return nil
}

func main() {
	if os.Getenv(envWorker) != "" {
		os.Exit(workerMain())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}
