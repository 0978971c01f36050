package sqlite

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3"
)

// loadLines writes count checkpoints as lines of 10 steps on threads
// prefix-0, prefix-1... through s and returns the commit latencies. Every
// Put is a read of the head (the compare-and-swap) followed by inserts in
// one transaction.
func loadLines(ctx context.Context, s *Saver, prefix string, count int) ([]time.Duration, error) {
	lat := make([]time.Duration, 0, count)
	var l *line
	for i := 0; i < count; i++ {
		if i%10 == 0 {
			l = newLine(prefix + "-" + strconv.Itoa(i/10))
		}
		req := l.next()
		start := time.Now()
		if err := s.Put(ctx, req); err != nil {
			return lat, fmt.Errorf("%s step %d: %w", l.thread, l.step, err)
		}
		lat = append(lat, time.Since(start))
		l.committed(req)
	}
	return lat, nil
}

// helperLoad is the child of TestLoadConcurrentWriters: it waits for the
// start file, writes its share and prints its latencies.
func helperLoad() error {
	db := os.Getenv(envDB)
	for {
		if _, err := os.Stat(db + ".go"); err == nil {
			break
		}
		time.Sleep(time.Millisecond)
	}
	count, _ := strconv.Atoi(os.Getenv(envCount))
	s, err := Open(db, Config{Synchronous: SyncNormal})
	if err != nil {
		return err
	}
	defer s.Close()
	lat, err := loadLines(context.Background(), s, os.Getenv(envPrefix), count)
	if err != nil {
		return err
	}
	for _, d := range lat {
		fmt.Println("LAT", d.Microseconds())
	}
	return nil
}

// TestLoadConcurrentWriters (R09): 8 goroutines and 4 processes write
// different threads of one file at the same time (8 x 250 and 4 x 500
// checkpoints; a tenth under -race). No SQLITE_BUSY or "database is
// locked" reaches any caller, every row is there, and the file passes
// integrity_check. The commit latencies are logged (p99 about 2.5 ms on
// a quiet machine, against the plan's 50 ms in docs/reliability.md), not
// checked: on a loaded machine they measure the machine, and a writer
// starved of the lock shows as the BUSY error checked above.
func TestLoadConcurrentWriters(t *testing.T) {
	perGoroutine, perProcess := 250, 500
	if raceEnabled {
		perGoroutine, perProcess = 30, 50
	}
	path := filepath.Join(t.TempDir(), "load.db")
	s := openAt(t, path, Config{Synchronous: SyncNormal})
	ctx := t.Context()
	var children []*child
	var scanners []*bufio.Scanner
	for p := 0; p < 4; p++ {
		c, sc := startChild(t, "load", envDB+"="+path, envCount+"="+strconv.Itoa(perProcess), envPrefix+"="+fmt.Sprint("proc", p))
		children = append(children, c)
		scanners = append(scanners, sc)
	}
	var mu sync.Mutex
	var lat []time.Duration
	var errs []error
	var wg sync.WaitGroup
	if err := os.WriteFile(path+".go", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := loadLines(ctx, s, fmt.Sprint("goroutine", g), perGoroutine)
			mu.Lock()
			defer mu.Unlock()
			lat = append(lat, l...)
			if err != nil {
				errs = append(errs, err)
			}
		}()
	}
	// Read the children's output while the goroutines run.
	var cwg sync.WaitGroup
	for i, c := range children {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			var mine []time.Duration
			for scanners[i].Scan() {
				if us, ok := strings.CutPrefix(scanners[i].Text(), "LAT "); ok {
					n, _ := strconv.Atoi(us)
					mine = append(mine, time.Duration(n)*time.Microsecond)
				}
			}
			err := c.cmd.Wait()
			mu.Lock()
			defer mu.Unlock()
			lat = append(lat, mine...)
			if err != nil {
				errs = append(errs, fmt.Errorf("process %d: %v: %s", i, err, c.stderr.String()))
			} else if len(mine) != perProcess {
				errs = append(errs, fmt.Errorf("process %d committed %d, want %d", i, len(mine), perProcess))
			}
		}()
	}
	wg.Wait()
	cwg.Wait()
	for _, err := range errs {
		if errors.Is(err, ErrStoreBusy) || strings.Contains(err.Error(), "locked") {
			t.Errorf("busy surfaced: %v", err)
		} else {
			t.Error(err)
		}
	}
	want := 8*perGoroutine + 4*perProcess
	threads := want / 10
	var n, taskWrites, writes, threadRows int
	db := s.DB()
	db.QueryRow("SELECT count(*), count(task_writes) FROM checkpoints").Scan(&n, &taskWrites)
	db.QueryRow("SELECT count(*) FROM writes").Scan(&writes)
	db.QueryRow("SELECT count(*) FROM threads").Scan(&threadRows)
	if n != want || taskWrites != want-threads || writes != 0 || threadRows != threads {
		t.Errorf("rows: %d checkpoints (%d with task writes), %d writes, %d threads; want %d (%d), 0, %d", n, taskWrites, writes, threadRows, want, want-threads, threads)
	}
	integrityOK(t, db)
	slices.Sort(lat)
	if len(lat) > 0 {
		p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
		t.Logf("%d commits: p50 %v, p99 %v, max %v", len(lat), p50, p99, lat[len(lat)-1])
	}
}

// TestLoadNegativeControl (R09): the read-then-write transaction that every
// Put makes is safe only because the saver begins its transactions
// IMMEDIATE. Raw transactions on one file, 8 goroutines each reading the
// tip and then inserting, get no SQLITE_BUSY with _txlock=immediate, the
// saver's setting; with _txlock=deferred, once all 8 have read (a barrier
// per round makes the interleaving certain, on any number of CPUs), all
// but the first to commit get SQLITE_BUSY: a reader's snapshot cannot be
// upgraded to a write after another commit, and the busy timeout does not
// help. So TestLoadConcurrentWriters can fail.
func TestLoadNegativeControl(t *testing.T) {
	if testing.Short() {
		t.Skip("load test")
	}
	path := filepath.Join(t.TempDir(), "control.db")
	s, err := Open(path, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB().Exec(`CREATE TABLE control (g INTEGER, i INTEGER, tip INTEGER)`); err != nil {
		t.Fatal(err)
	}
	closeChecked(t, s)

	run := func(txlock string, barrier bool) (busy, other int) {
		db, err := sql.Open("sqlite3", path+"?_journal_mode=WAL&_busy_timeout=5000&_txlock="+txlock)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		const goroutines, each = 8, 100
		db.SetMaxOpenConns(goroutines)
		var mu sync.Mutex
		var wg sync.WaitGroup
		rounds := make([]sync.WaitGroup, each) // everyone has read in round i
		for i := range rounds {
			rounds[i].Add(goroutines)
		}
		for g := range goroutines {
			wg.Go(func() {
				for i := range each {
					err := func() error {
						tx, err := db.Begin()
						if err != nil {
							if barrier {
								rounds[i].Done()
							}
							return err
						}
						defer tx.Rollback()
						var tip int
						err = tx.QueryRow(`SELECT coalesce(max(rowid), 0) FROM control`).Scan(&tip)
						if barrier {
							rounds[i].Done()
							rounds[i].Wait()
						}
						if err != nil {
							return err
						}
						if _, err := tx.Exec(`INSERT INTO control VALUES (?, ?, ?)`, g, i, tip); err != nil {
							return err
						}
						return tx.Commit()
					}()
					var se sqlite3.Error
					mu.Lock()
					switch {
					case err == nil:
					case errors.As(err, &se) && se.Code == sqlite3.ErrBusy:
						busy++
					default:
						other++
						if other == 1 {
							t.Logf("txlock=%s: %v", txlock, err)
						}
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		return busy, other
	}
	if busy, other := run("immediate", false); busy != 0 || other != 0 {
		t.Errorf("_txlock=immediate: %d SQLITE_BUSY and %d other errors in 800 transactions, want none", busy, other)
	}
	busy, other := run("deferred", true)
	t.Logf("_txlock=deferred: %d of 800 transactions got SQLITE_BUSY", busy)
	// Per round, all but the first to commit fail: 700. A long-tier run
	// once saw 701 (a round in which nobody committed; the cause was not
	// established). No round can commit twice, so fewer than 700 is the
	// control failing, and more is not.
	if busy < 100*(8-1) {
		t.Errorf("_txlock=deferred: %d SQLITE_BUSY in 800 read-then-write transactions, want at least the 700 that read before another committed: the control does not show the failure it guards against", busy)
	}
	if other != 0 {
		t.Errorf("_txlock=deferred: %d errors other than SQLITE_BUSY", other)
	}
}
