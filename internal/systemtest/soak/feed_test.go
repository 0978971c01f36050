package soak_test

import (
	"context"
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/lockstepgo/lockstep/internal/systemtest"
	"github.com/lockstepgo/lockstep/nodes/ledger"
)

// The soak's message feed and nemesis (docs/reliability.md R52).
//
// The feed is a broker: a separate SQLite file (never under injected
// faults) that the parent fills before the children start, with every
// one of N messages delivered three times. A message's first copy is due
// at a seeded time of the run; each copy comes up to soakCopyJitter later,
// so that copies of one message are often taken by two consumers at once.
// A consumer takes a due delivery under a lease (soakDeliveryLease) and
// acknowledges it after handling it; a delivery whose consumer died or
// was stopped past the lease is delivered again, so a message may be
// delivered more than three times.
//
// Each message asks for one thread to be started. A child handles it in one
// transaction on the soak's file: ledger.ClaimMessageTx, then the rows that
// register the thread (soak_threads) and record the handling
// (soak_handled, deliberately without a unique key, so that a message
// handled twice shows); then it acknowledges the delivery and starts the
// thread. A registered thread that nobody started (the child died, or
// Invoke failed) is started by any child's scanner later, like every
// other unfinished thread.

// soakSchema holds the soak's own tables in the soak's file: the threads
// any child registered (before starting them), and one row per message
// handling.
const soakSchema = `
CREATE TABLE IF NOT EXISTS soak_threads (thread TEXT PRIMARY KEY, origin TEXT NOT NULL, registered_at INTEGER NOT NULL, done INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS soak_handled (seq INTEGER PRIMARY KEY AUTOINCREMENT, message_id TEXT NOT NULL, thread TEXT NOT NULL, proc INTEGER NOT NULL, incarnation INTEGER NOT NULL);`

const soakFeedSchema = `
CREATE TABLE IF NOT EXISTS deliveries (seq INTEGER PRIMARY KEY, message_id TEXT NOT NULL, body TEXT NOT NULL, due INTEGER NOT NULL,
	owner TEXT NOT NULL DEFAULT '', lease_until INTEGER NOT NULL DEFAULT 0, attempts INTEGER NOT NULL DEFAULT 0, acked INTEGER NOT NULL DEFAULT 0);`

const (
	// soakCopies is how many times the feed delivers each message.
	soakCopies = 3
	// soakCopyJitter bounds how much later than a message's first copy
	// the other copies are due.
	soakCopyJitter = 2 * time.Second
	// soakDeliveryLease is how long a taken delivery stays invisible.
	soakDeliveryLease = 3 * time.Second
	// soakMessagesPerSecond is the feed's rate (at least soakMinMessages).
	soakMessagesPerSecond = 3
	soakMinMessages       = 20
	// soakTakeOverAge: a child's scanner advances any unfinished thread
	// registered at least this long ago (longer than the graph's lease,
	// so a thread whose runner was killed or stopped is taken over).
	soakTakeOverAge = 3 * time.Second
	// soakLivenessGap: during the run, and at its end, no stretch this
	// long may pass without a thread completing.
	soakLivenessGap = 10 * time.Second
)

// soakFeedScope is the scope of the feed's message IDs.
var soakFeedScope = ledger.MessageScope("soak", "feed")

// soakMessage is what a message of the feed says.
type soakMessage struct {
	ID     string `json:"id"`
	Thread string `json:"thread"`
}

func soakMessageOf(seed uint64, i int) soakMessage {
	return soakMessage{ID: fmt.Sprintf("m-%d", i), Thread: fmt.Sprintf("soak-%d-m%d", seed%100000, i)}
}

// openSoakFeed opens the feed's file (a side file: never under faults).
func openSoakFeed(path string) (*sql.DB, error) { return systemtest.OpenSideFile(path, soakFeedSchema) }

// fillSoakFeed writes the deliveries of n messages, due from start on
// over the first 80% of run, in an order and at times drawn from seed.
func fillSoakFeed(ctx context.Context, feed *sql.DB, seed uint64, n int, start time.Time, run time.Duration) error {
	r := rand.New(rand.NewPCG(seed, 0x66656564)) // "feed"
	tx, err := feed.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for i := range n {
		m := soakMessageOf(seed, i)
		body, err := json.Marshal(m)
		if err != nil {
			return err
		}
		first := time.Duration(r.Int64N(int64(run) * 8 / 10))
		for c := range soakCopies {
			due := first
			if c > 0 {
				due += time.Duration(r.Int64N(int64(soakCopyJitter)))
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO deliveries (message_id, body, due) VALUES (?, ?, ?)`,
				m.ID, string(body), start.Add(due).UnixNano()); err != nil {
				return err
			}
		}
	}
	return tx.Commit()
}

// soakDelivery is one delivery taken from the feed.
type soakDelivery struct {
	Seq       int64
	MessageID string
	Body      string
}

// takeSoakDelivery takes the earliest due delivery that nobody holds, or
// returns false.
func takeSoakDelivery(ctx context.Context, feed *sql.DB, owner string) (soakDelivery, bool, error) {
	now := time.Now()
	var d soakDelivery
	err := feed.QueryRowContext(ctx, `UPDATE deliveries SET owner = ?, lease_until = ?, attempts = attempts + 1
		WHERE seq = (SELECT seq FROM deliveries WHERE acked = 0 AND due <= ? AND lease_until <= ? ORDER BY due, seq LIMIT 1)
		RETURNING seq, message_id, body`, owner, now.Add(soakDeliveryLease).UnixNano(), now.UnixNano(), now.UnixNano()).Scan(&d.Seq, &d.MessageID, &d.Body)
	if errors.Is(err, sql.ErrNoRows) {
		return d, false, nil
	}
	return d, err == nil, err
}

// settleSoakDelivery acknowledges a delivery (ack) or gives it back to be
// delivered again at once.
func settleSoakDelivery(ctx context.Context, feed *sql.DB, d soakDelivery, owner string, ack bool) error {
	q := `UPDATE deliveries SET lease_until = 0 WHERE seq = ? AND owner = ? AND acked = 0`
	if ack {
		q = `UPDATE deliveries SET acked = 1 WHERE seq = ? AND owner = ?`
	}
	_, err := feed.ExecContext(ctx, q, d.Seq, owner)
	return err
}

// soakNemesisAction is one step of the nemesis: at At after the start,
// SIGKILL process Proc (the parent restarts it), or SIGSTOP it and
// SIGCONT it Pause later.
type soakNemesisAction struct {
	At    time.Duration
	Proc  int
	Kill  bool
	Pause time.Duration
}

func (a soakNemesisAction) String() string {
	if a.Kill {
		return fmt.Sprintf("%v: kill %d", a.At.Round(time.Millisecond), a.Proc)
	}
	return fmt.Sprintf("%v: stop %d for %v", a.At.Round(time.Millisecond), a.Proc, a.Pause.Round(time.Millisecond))
}

// soakNemesisPlan draws the nemesis's actions from seed: one 1–5 s after
// the previous one ended, on a random process, half kills and half stops of 0.5–4 s (longer than
// the graph's 2 s lease about half the time), all done a second before
// the run ends. A plan of one action or more kills at least once, and
// one of two or more also stops a process, so that no seed leaves the
// take-over of a dead process's threads (or of a stopped one's) out.
func soakNemesisPlan(seed uint64, procs int, run time.Duration) []soakNemesisAction {
	r := rand.New(rand.NewPCG(seed, 0x6e656d65)) // "neme"
	var plan []soakNemesisAction
	at := time.Duration(0)
	for {
		at += time.Second + time.Duration(r.Int64N(int64(4*time.Second)))
		a := soakNemesisAction{At: at, Proc: r.IntN(procs), Kill: r.IntN(2) == 0}
		pause := 500*time.Millisecond + time.Duration(r.Int64N(int64(3500*time.Millisecond)))
		if !a.Kill {
			a.Pause = pause
		}
		if at+a.Pause > run-time.Second {
			break
		}
		plan = append(plan, a)
		at += a.Pause // the next action comes 1–5 s after this one ends
	}
	kill := func(a soakNemesisAction) bool { return a.Kill }
	if len(plan) > 0 && !slices.ContainsFunc(plan, kill) {
		plan[0].Kill, plan[0].Pause = true, 0 // shorter: the rest still fits
	}
	if len(plan) > 1 && !slices.ContainsFunc(plan, func(a soakNemesisAction) bool { return !a.Kill }) {
		// The latest kill with room for a stop of 0.5 s or more before
		// the next action (or the end) becomes a stop.
		for i := len(plan) - 1; i >= 0; i-- {
			end := run - time.Second
			if i+1 < len(plan) {
				end = plan[i+1].At
			}
			if room := end - plan[i].At; room >= 500*time.Millisecond {
				plan[i].Kill, plan[i].Pause = false, min(4*time.Second, room)
				break
			}
		}
	}
	return plan
}

// soakSlot is one child process across its incarnations: the nemesis
// signals the current one, and a killed one is restarted.
type soakSlot struct {
	mu     sync.Mutex
	proc   *os.Process // the running incarnation, or nil
	killed bool        // the nemesis killed proc
}

// signal sends sig to the running incarnation and returns it (nil when
// none runs). A kill is remembered, so that the exit is not a failure.
func (s *soakSlot) signal(sig syscall.Signal) *os.Process {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return nil
	}
	if sig == syscall.SIGKILL {
		s.killed = true
	}
	if err := s.proc.Signal(sig); err != nil {
		return nil
	}
	return s.proc
}

// soakStopWindow is when a process was stopped.
type soakStopWindow struct{ From, To time.Time }

// runSoakNemesis carries the plan out from start on, until stop is
// closed, or until an action would reach past the run (start+run); it
// returns the actions it took and when processes were stopped. A stopped
// process is always continued.
func runSoakNemesis(plan []soakNemesisAction, slots []*soakSlot, start time.Time, run time.Duration, stop <-chan struct{}) (done []string, stops []soakStopWindow) {
	for _, a := range plan {
		select {
		case <-stop:
			return done, stops
		case <-time.After(time.Until(start.Add(a.At))):
		}
		if time.Since(start)+a.Pause > run {
			// Late (a slow machine): the nemesis must not reach into
			// the drain.
			return done, stops
		}
		if a.Kill {
			if slots[a.Proc].signal(syscall.SIGKILL) != nil {
				done = append(done, a.String())
			}
			continue
		}
		from := time.Now()
		p := slots[a.Proc].signal(syscall.SIGSTOP)
		if p == nil {
			continue
		}
		time.Sleep(a.Pause)
		p.Signal(syscall.SIGCONT)
		stops = append(stops, soakStopWindow{From: from, To: time.Now()})
		done = append(done, a.String())
	}
	return done, stops
}

// soakLiveWAL returns the bytes of the WAL that are in use (the frames
// after the last restart of the WAL, which a checkpoint cannot yet
// recycle), read from the wal-index header in db's -shm file: mxFrame,
// a native-endian u32 at offset 16, and the page size at offset 14.
// Unlike the -wal file's size, which is a high-water mark, it falls back
// when the WAL restarts.
func soakLiveWAL(db string) (int64, bool) {
	f, err := os.Open(db + "-shm")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	var hdr [48]byte
	if _, err := io.ReadFull(f, hdr[:]); err != nil {
		return 0, false
	}
	page := int64(binary.NativeEndian.Uint16(hdr[14:]))
	if page == 1 {
		page = 65536
	}
	frames := int64(binary.NativeEndian.Uint32(hdr[16:]))
	return frames * (page + 24), true
}
