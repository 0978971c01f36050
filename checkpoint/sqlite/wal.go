package sqlite

import (
	"context"
	"fmt"
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
// checkpoint that waits (restartPlan says how long) for the readers to
// move to the newest snapshot, copies everything, and truncates the file.
const (
	// walRestartBytes is the WAL file size past which the writer forces
	// a restart: twice the automatic checkpoint's 16 MiB, half of
	// docs/reliability.md's 64 MiB bound.
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
	// walUrgentBytes is the WAL file size past which the keeper presses
	// harder (see restartPlan): three quarters of the 64 MiB bound.
	walUrgentBytes = 48 << 20
)

// restartPlan returns how long a forced checkpoint of a WAL file of size
// bytes waits for readers to reach the newest snapshot, and how many
// looks to skip when a reader still held an old one. Past
// walRestartBytes it is walRestartWait and walRetryLooks: a short stall
// of the writers, then 1,024 commits of grace. The nearer the file comes
// to the bound, the less room those 1,024 commits leave (at a few hundred
// KiB a commit they are tens of MiB) and the likelier a slow reader on a
// loaded machine, so the keeper then waits longer and tries again sooner:
// past 40 MiB it waits twice as long and skips a quarter of the looks,
// past walUrgentBytes it waits five times as long and tries at every
// look. A reader that outlasts even that is one that stopped (a process
// paused while it reads): no wait can help, and the writers only pay the
// wait once every walCheckEvery commits.
func restartPlan(size int64) (wait time.Duration, skip int) {
	switch {
	case size >= walUrgentBytes:
		return 5 * walRestartWait, 0
	case size >= (walRestartBytes+walUrgentBytes)/2:
		return 2 * walRestartWait, walRetryLooks / 4
	default:
		return walRestartWait, walRetryLooks
	}
}

// walKeeper is the writer's state for keeping the WAL bounded, and for
// watching that the -wal file is still the one SQLite writes (see
// checkWALInUse).
type walKeeper struct {
	commits  int // since the last look at the file
	skip     int // looks to skip after a forced checkpoint that did not finish
	restarts int // forced checkpoints that finished (for tests)

	// f is the -wal file as SQLite had it open when the saver started
	// watching (nil until then), fi its identity. Holding it keeps the
	// inode from being reused while the saver compares it with the path.
	// SQLite takes no lock on the -wal (its locks are on the database
	// file and the -shm), so this descriptor cannot release one.
	f    *os.File
	fid  fileID
	path string // the -wal's path
	hdr  [walHeaderSize]byte
	// salt is the salts of f's header when last read: they change when
	// SQLite starts the WAL over, and stamp is then set until a write
	// transaction wrote page 1 again (see stampPage1).
	salt  [8]byte
	stamp bool
	looks int    // commits since the path was last compared (see walPathEvery)
	id    uint32 // the file's identity (PRAGMA application_id); 0: none
	// lost is the *WALError, once the -wal was found deleted or replaced:
	// every later write fails with it. saveTried: the deleted file's
	// commits were checkpointed into the database (or that was tried).
	lost      *WALError
	saveTried bool

	// For tests: wait replaces restartPlan's wait when positive, and
	// collided runs each time a forced checkpoint could not start
	// because another connection was running one.
	wait     time.Duration
	collided func()
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
	wait, skip := restartPlan(fi.Size())
	switch s.restartWAL(ctx, wait) {
	case walRestarted:
		k.restarts++
	case walReaderHeld:
		k.skip = skip
	case walNotStarted:
		// Nothing waited: try again at the next look.
	}
}

// walRestart is what a forced checkpoint came to.
type walRestart int

const (
	// walRestarted: it copied everything and truncated the file.
	walRestarted walRestart = iota
	// walReaderHeld: it waited and a reader still held an old snapshot
	// (or it failed).
	walReaderHeld
	// walNotStarted: another connection was checkpointing all along, so
	// it never ran.
	walNotStarted
)

// restartWAL runs a TRUNCATE checkpoint on the writer, waiting wait at
// most for the readers to reach the newest snapshot (SQLite's busy
// timeout while it runs), and says what came of it.
//
// SQLite refuses a checkpoint at once, without calling the busy handler,
// while another connection runs one: the automatic checkpoint that
// follows every commit of another connection or process once the WAL is
// past walAutocheckpoint (always the case here), or another process's
// forced one. On a busy file that is most attempts, and more of them the
// slower the machine, since those checkpoints last longer. Such an
// attempt waited for nothing: it is tried again after a short pause,
// within the same wait, and when the other checkpoint outlasts the wait,
// keepWAL tries again at its next look. Only an attempt that waited for a
// reader and still could not finish is one keepWAL backs off from.
func (s *Saver) restartWAL(ctx context.Context, wait time.Duration) walRestart {
	c := s.wconn
	if c == nil {
		return walReaderHeld
	}
	if s.wal.wait > 0 {
		wait = s.wal.wait
	}
	deadline := time.Now().Add(wait)
	defer func() {
		if _, err := c.ExecContext(ctx, "PRAGMA busy_timeout = "+strconv.FormatInt(s.cfg.busyMillis, 10)); err != nil {
			// A writer left with the short timeout would fail writes that
			// should wait: take a fresh connection at the next write.
			s.dropWriter()
		}
	}()
	for pause := time.Millisecond; ; pause = min(2*pause, 10*time.Millisecond) {
		left := time.Until(deadline)
		if _, err := c.ExecContext(ctx, "PRAGMA busy_timeout = "+strconv.FormatInt(max(left.Milliseconds(), 1), 10)); err != nil {
			return walReaderHeld
		}
		var busy, logFrames, done int
		err := c.QueryRowContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)").Scan(&busy, &logFrames, &done)
		switch {
		case err == nil && busy == 0:
			return walRestarted
		case err != nil || logFrames != -1:
			// It ran and could not finish (a reader holds an old
			// snapshot), or it failed.
			return walReaderHeld
		}
		// It did not start (-1 frames): another connection is
		// checkpointing.
		if s.wal.collided != nil {
			s.wal.collided()
		}
		if time.Until(deadline) < pause {
			return walNotStarted
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return walNotStarted
		case <-t.C:
		}
	}
}

// The checks of the -wal beside the database, made by Open before SQLite
// reads it (checkOrphanWAL, checkForeignWAL), and by the writer before
// each commit (checkWALInUse).

// checkOrphanWAL refuses to create a database at path (missing or empty)
// while a -wal with frames is beside it: SQLite would take it for the new
// file's (it deletes one beside an empty file, and replays it into any
// other), and it is the only copy of another database's last commits.
func checkOrphanWAL(path string) error {
	w, err := readWAL(path + "-wal")
	if err != nil {
		return fmt.Errorf("checkpoint/sqlite: open %q: read its -wal: %w", path, err)
	}
	if w.frames == 0 {
		return nil
	}
	// Another process may have created the file, and its -wal, meanwhile:
	// probe then reads it as an existing file.
	if st, err := os.Stat(path); err == nil && st.Size() > 0 {
		return nil
	}
	return &WALError{Path: path, Foreign: true, Reason: fmt.Sprintf("there is no database, and the -wal beside its path holds %d frames of one (a database deleted without its -wal, or a -wal copied here)", w.frames)}
}

// watchWAL starts watching the -wal: it keeps the file as SQLite has it
// open now (the writer read the database, so SQLite opened or created
// it), and reads the file's identity, for stampPage1. When there is no
// -wal yet, the first write starts watching.
func (s *Saver) watchWAL(ctx context.Context) error {
	var id int64
	if err := s.wconn.QueryRowContext(ctx, "PRAGMA application_id").Scan(&id); err != nil {
		return openErr(s.cfg.path, "open", err)
	}
	s.wal.id = uint32(int32(id))
	s.wal.path = s.cfg.path + "-wal"
	s.wal.follow()
	return nil
}

// follow keeps the -wal file at k.path as the one SQLite writes (none
// when it cannot be opened), and its header's salts.
func (k *walKeeper) follow() {
	k.unfollow()
	f, err := os.Open(k.path)
	if err != nil {
		return
	}
	id, ok := idOf(f)
	if !ok {
		f.Close()
		return
	}
	k.f, k.fid = f, id
	k.salt, _ = k.readSalt()
}

// unfollow closes the kept -wal file.
func (k *walKeeper) unfollow() {
	if k.f != nil {
		k.f.Close()
		k.f, k.fid = nil, fileID{}
	}
}

// readSalt reads the salts of the kept -wal file's header; ok is false
// when it has no header yet.
func (k *walKeeper) readSalt() (salt [8]byte, ok bool) {
	if _, err := k.f.ReadAt(k.hdr[:], 0); err != nil {
		return salt, false
	}
	copy(salt[:], k.hdr[16:24])
	return salt, true
}

// checkWALInUse runs in each write transaction of the writer, just before
// its COMMIT (and before Vacuum): it refuses the commit, with a
// *WALError matching ErrWALDeleted, when the -wal path no longer names
// the file SQLite writes (it was deleted, moved, or another file put in
// its place). SQLite would go on writing the file it has open, which no
// connection opened later and no other process reads, and which
// disappears with the process: every commit acknowledged from then on
// would be lost. It compares the path with the file kept by follow: a
// fstat of that file at every commit tells whether it lost its name
// (deleted, or another file renamed over it), and every walPathEvery
// commits a stat of the path tells whether it was moved away. The caller holds wsem, rolls back, and calls saveDetachedWAL.
func (s *Saver) checkWALInUse() error {
	k := &s.wal
	if k.lost != nil {
		return k.lost
	}
	if k.path == "" {
		return nil // not watching (an OpenExisting saver that never wrote)
	}
	if k.f == nil {
		k.follow()
		return nil
	}
	gone := unlinked(k.f)
	if k.looks++; !gone && k.looks < walPathEvery {
		return nil
	}
	k.looks = 0
	id, size, exists := statID(k.path)
	if !gone && exists && id.same(k.fid) {
		if size == 0 {
			// Truncated: this commit starts the WAL over.
			k.stamp = true
		}
		return nil
	}
	if !walStillOpen(k.f) {
		// No connection of this process has the old file open any more:
		// SQLite closed it, and the last connection to the database (in
		// another process) deleted it, as it does. Follow the new one.
		k.follow()
		return nil
	}
	reason := k.path + " names no file now"
	if exists {
		reason = k.path + " now names another file than the one SQLite writes"
	}
	k.lost = &WALError{Path: s.cfg.path, Reason: reason}
	return k.lost
}

// walStillOpen reports whether a descriptor of this process other than
// own has own's file open (on Linux, from /proc/self/fd); true when that
// cannot be told, so that a doubt refuses the commit.
func walStillOpen(own *os.File) bool {
	fi, err := own.Stat()
	if err != nil {
		return true
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return true
	}
	self := strconv.FormatUint(uint64(own.Fd()), 10)
	for _, e := range ents {
		if e.Name() == self {
			continue
		}
		if other, err := os.Stat("/proc/self/fd/" + e.Name()); err == nil && os.SameFile(other, fi) {
			return true
		}
	}
	return false
}

// saveDetachedWAL, once, after checkWALInUse refused a commit: a FULL
// checkpoint on the writer, which still has the deleted file open, copies
// the commits acknowledged so far into the database file, so that they
// survive the process. It returns the *WALError, Saved set when the
// checkpoint copied everything. The caller holds wsem, outside any
// transaction.
func (s *Saver) saveDetachedWAL(ctx context.Context) error {
	k := &s.wal
	if k.lost == nil {
		return nil
	}
	if k.saveTried {
		return k.lost
	}
	k.saveTried = true
	if s.wconn != nil {
		var busy, logFrames, done int
		err := s.wconn.QueryRowContext(ctx, "PRAGMA wal_checkpoint(FULL)").Scan(&busy, &logFrames, &done)
		k.lost.Saved = err == nil && busy == 0 && logFrames == done
	}
	return k.lost
}

// stampPage1 writes page 1 (the database header, with the file's
// identity) in the transaction about to commit when the WAL started over
// since the last one did, so that every generation of the -wal holds the
// identity checkForeignWAL compares (SQLite writes page 1 only when the
// schema or the file's size changes, which can take several commits). It
// writes application_id back unchanged; it does nothing for a file
// without one. It returns whether it wrote. The caller holds wsem.
func (s *Saver) stampPage1(t *wtx) bool {
	k := &s.wal
	if !k.stamp || k.id == 0 {
		return false
	}
	_, err := t.exec("PRAGMA application_id = " + strconv.FormatInt(int64(int32(k.id)), 10))
	return err == nil
}

// walCommitted runs after each commit of the writer: it notes whether
// SQLite started the WAL over (its header's salts changed), so that the
// next transaction writes page 1 again; stamped says this one did.
func (k *walKeeper) walCommitted(stamped bool) {
	if k.f == nil {
		return
	}
	salt, ok := k.readSalt()
	if !ok {
		return
	}
	if stamped {
		k.stamp = false
	} else if salt != k.salt {
		k.stamp = true
	}
	k.salt = salt
}
