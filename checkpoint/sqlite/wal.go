package sqlite

import (
	"context"
	"os"
	"strconv"
	"time"
)

// The WAL is copied back into the database by SQLite's automatic
// checkpoint (walAutocheckpoint), after commits, as far as no reader still
// needs its frames; the file starts over from its beginning only once
// every frame was copied and no reader uses any. Readers that overlap
// without a gap, or a reader that stops (a process paused while it reads),
// can keep that from ever happening, and the WAL then grows with every
// commit, long after the reader that caused it is gone. walKeeper watches
// the file's size and, once it passes walRestartBytes, asks for a
// checkpoint that waits (walRestartWait at most) for the readers to move
// to the newest snapshot, copies everything, and truncates the file.
const (
	// walRestartBytes is the WAL file size past which the writer forces
	// a restart: twice the automatic checkpoint's 16 MiB, half of
	// RELIABILITY.md's 64 MiB bound.
	walRestartBytes = 32 << 20
	// walCheckEvery is how many commits pass between looks at the file.
	walCheckEvery = 64
	// walRestartWait is how long a forced checkpoint waits for readers
	// (SQLite's busy timeout while it runs); other writers wait as long.
	walRestartWait = 100 * time.Millisecond
	// walRetryLooks is how many looks at the file are skipped after a
	// forced checkpoint that could not finish (a reader still holds an
	// old snapshot): 1,024 commits, about half a second of a busy writer.
	walRetryLooks = 16
)

// walKeeper is the writer's state for keeping the WAL bounded.
type walKeeper struct {
	commits  int // since the last look at the file
	skip     int // looks to skip after a forced checkpoint that did not finish
	restarts int // forced checkpoints that finished (for tests)
}

// keepWAL runs after each commit of the writer: every walCheckEvery
// commits it looks at the WAL file's size and, past walRestartBytes,
// forces a checkpoint that truncates it (see walKeeper). Failures are
// ignored: the commit is done, and the next look tries again. The caller
// holds wsem.
func (s *Saver) keepWAL(ctx context.Context) {
	k := &s.wal
	if k.commits++; k.commits < walCheckEvery {
		return
	}
	k.commits = 0
	if k.skip > 0 {
		k.skip--
		return
	}
	fi, err := os.Stat(s.cfg.path + "-wal")
	if err != nil || fi.Size() < walRestartBytes {
		return
	}
	if s.restartWAL(ctx) {
		k.restarts++
		return
	}
	k.skip = walRetryLooks
}

// restartWAL runs a TRUNCATE checkpoint on the writer with a short busy
// timeout, and reports whether it finished.
func (s *Saver) restartWAL(ctx context.Context) bool {
	c := s.wconn
	if c == nil {
		return false
	}
	if _, err := c.ExecContext(ctx, "PRAGMA busy_timeout = "+strconv.FormatInt(walRestartWait.Milliseconds(), 10)); err != nil {
		return false
	}
	var busy, logFrames, done int
	err := c.QueryRowContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)").Scan(&busy, &logFrames, &done)
	if _, rerr := c.ExecContext(ctx, "PRAGMA busy_timeout = "+strconv.FormatInt(s.cfg.busyMillis, 10)); rerr != nil {
		// A writer left with the short timeout would fail writes that
		// should wait: take a fresh connection at the next write.
		s.dropWriter()
	}
	return err == nil && busy == 0
}
