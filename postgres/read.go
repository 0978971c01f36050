package postgres

import (
	"bytes"
	"cmp"
	"context"
	"crypto/md5"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/internal/strictjson"
)

// crcOf computes what the schema's crc function computes over parts: the
// MD5 of each part as "<octet length>:<text>", or "-" for NULL (a nil
// part). Rows carry it over their key and every column, with JSONB
// columns as PostgreSQL prints them, so that a row edited by hand, or
// copied under another key, fails it.
func crcOf(parts ...[]byte) []byte {
	h := md5.New()
	for _, p := range parts {
		if p == nil {
			h.Write([]byte("-"))
			continue
		}
		h.Write(strconv.AppendInt(nil, int64(len(p)), 10))
		h.Write([]byte(":"))
		h.Write(p)
	}
	return h.Sum(nil)
}

func str(s string) []byte {
	if s == "" {
		return []byte{}
	}
	return []byte(s)
}

func nstr(s *string) []byte {
	if s == nil {
		return nil
	}
	return str(*s)
}

func num(n int64) []byte { return strconv.AppendInt(nil, n, 10) }

// cpRow is a checkpoints row as read.
type cpRow struct {
	ns, id          string
	parent          *string
	step            int64
	source, created string
	metadata, vers  []byte
	mark            string
	crc             []byte
	metaText        *string
	parentStep      *int64
	thread          string
}

var versionsJSON = strictjson.For(reflect.TypeFor[map[string]string]())

// checkpoint decodes the row into a checkpoint without channels. It
// returns a *checkpoint.CorruptError when the row fails its checksum or
// does not decode.
func (r *cpRow) checkpoint() (checkpoint.Checkpoint, error) {
	corrupt := func(err error) (checkpoint.Checkpoint, error) {
		return checkpoint.Checkpoint{}, &checkpoint.CorruptError{Thread: r.thread, Checkpoint: r.id, What: "checkpoint", Err: err}
	}
	want := crcOf(str(r.thread), str(r.ns), str(r.id), nstr(r.parent), num(r.step), str(r.source), str(r.created), r.metadata, nstr(r.metaText), r.vers, str(r.mark))
	if !bytes.Equal(want, r.crc) {
		return corrupt(errors.New("checksum mismatch: the row was changed or copied from another key"))
	}
	cp := checkpoint.Checkpoint{ID: r.id, Mark: r.mark}
	if r.parent != nil {
		if *r.parent == "" {
			return corrupt(errors.New("an empty parent ID"))
		}
		cp.ParentID = *r.parent
	}
	var err error
	if cp.CreatedAt, err = parseTime(r.created); err != nil {
		return corrupt(fmt.Errorf("created_at: %w", err))
	}
	meta := r.metadata
	if r.metaText != nil {
		meta = []byte(*r.metaText)
	}
	if err := json.Unmarshal(meta, &cp.Metadata); err != nil {
		return corrupt(fmt.Errorf("metadata: %w", err))
	}
	if int64(cp.Metadata.Step) != r.step || string(cp.Metadata.Source) != r.source {
		return corrupt(fmt.Errorf("the step and source columns (%d, %q) differ from the metadata's (%d, %q)", r.step, r.source, cp.Metadata.Step, cp.Metadata.Source))
	}
	if cp.Metadata.Parents == nil {
		cp.Metadata.Parents = map[string]string{}
	}
	if err := versionsJSON.Check(r.vers); err != nil {
		return corrupt(fmt.Errorf("versions: %w", err))
	}
	if err := json.Unmarshal(r.vers, &cp.Versions); err != nil {
		return corrupt(fmt.Errorf("versions: %w", err))
	}
	if cp.Versions == nil {
		cp.Versions = map[string]string{}
	}
	return cp, nil
}

// writeRowRead is a writes row as read.
type writeRowRead struct {
	ns, id        string
	task, channel string
	idx           int64
	node, path    string
	value, crc    []byte
	thread        string
}

func (w *writeRowRead) pending() (checkpoint.PendingWrite, error) {
	want := crcOf(str(w.thread), str(w.ns), str(w.id), str(w.task), num(w.idx), str(w.channel), str(w.node), str(w.path), w.value)
	if !bytes.Equal(want, w.crc) {
		return checkpoint.PendingWrite{}, &checkpoint.CorruptError{Thread: w.thread, Checkpoint: w.id,
			What: fmt.Sprintf("pending write of task %q channel %q", w.task, w.channel), Err: errors.New("checksum mismatch: the row was changed or copied from another key")}
	}
	pos := int(w.idx)
	if int64(checkpoint.WriteIndex(w.channel, pos)) != w.idx {
		return checkpoint.PendingWrite{}, &checkpoint.CorruptError{Thread: w.thread, Checkpoint: w.id,
			What: fmt.Sprintf("pending write of task %q channel %q", w.task, w.channel), Err: fmt.Errorf("index %d is not the channel's", w.idx)}
	}
	return checkpoint.PendingWrite{TaskID: w.task, Node: w.node, Path: w.path, Channel: w.channel, Value: json.RawMessage(w.value)}, nil
}

// sortWrites orders writes by task ID, then index, as every saver does.
func sortWrites(ws []writeRowRead) {
	slices.SortFunc(ws, func(a, b writeRowRead) int {
		if c := strings.Compare(a.task, b.task); c != 0 {
			return c
		}
		return cmp.Compare(a.idx, b.idx)
	})
}

// blobRead is a blobs row as read.
type blobRead struct {
	ns, channel, version, kind, base string
	value, crc                       []byte
	stop                             *string
	thread                           string
}

func (b *blobRead) blob() (checkpoint.Blob, error) {
	want := crcOf(str(b.thread), str(b.ns), str(b.channel), str(b.version), str(b.kind), str(b.base), b.value)
	if !bytes.Equal(want, b.crc) {
		return checkpoint.Blob{}, fmt.Errorf("blob %q: checksum mismatch: the row was changed or copied from another key", b.version)
	}
	switch b.kind {
	case "value":
		if b.base != "" {
			return checkpoint.Blob{}, fmt.Errorf("blob %q: a value with a base", b.version)
		}
		return checkpoint.Blob{Version: b.version, Data: json.RawMessage(b.value)}, nil
	case "append":
		if len(b.value) == 0 || b.value[0] != '[' {
			return checkpoint.Blob{}, fmt.Errorf("blob %q: an append that is not an array", b.version)
		}
		return checkpoint.Blob{Version: b.version, Base: b.base, Append: true, Data: json.RawMessage(b.value)}, nil
	}
	return checkpoint.Blob{}, fmt.Errorf("blob %q: unknown kind %q", b.version, b.kind)
}

type blobKey struct{ ns, channel, version string }

// chain builds channel ch's blobs at version, oldest first, from the
// blobs read, stopping before stop (a version the caller holds).
func chain(blobs map[blobKey]*blobRead, ns, ch, version, stop string) ([]checkpoint.Blob, error) {
	var rev []checkpoint.Blob
	v := version
	for {
		if stop != "" && v == stop && len(rev) > 0 {
			break
		}
		br, ok := blobs[blobKey{ns, ch, v}]
		if !ok {
			return nil, fmt.Errorf("missing blob for version %q", v)
		}
		b, err := br.blob()
		if err != nil {
			return nil, err
		}
		rev = append(rev, b)
		if !b.Append || b.Base == "" {
			break
		}
		if len(rev) > len(blobs) {
			return nil, fmt.Errorf("cycle in blob chain at version %q", v)
		}
		v = b.Base
	}
	slices.Reverse(rev)
	return rev, nil
}

// Get implements checkpoint.Saver: one statement reads the checkpoint,
// its pending writes and the blobs of every channel the caller does not
// hold (opts.Have), append chains included, in one snapshot. It returns
// an error wrapping checkpoint.ErrInvalid for an empty thread, one
// matching checkpoint.ErrNotFound when there is no such checkpoint, a
// *checkpoint.CorruptError naming thread and checkpoint when a row fails
// its checksum or does not decode, checkpoint.ErrClosed, ctx's error, or
// a *StoreError.
func (s *Saver) Get(ctx context.Context, ref checkpoint.Ref, opts checkpoint.GetOptions) (*checkpoint.Tuple, error) {
	if ref.Thread == "" {
		return nil, fmt.Errorf("%w: empty thread ID", checkpoint.ErrInvalid)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := s.live(); err != nil {
		return nil, err
	}
	var have any
	if opts.Have != nil {
		b, err := json.Marshal(opts.Have)
		if err != nil {
			return nil, err
		}
		have = string(b)
	}
	rows, err := s.db.pool.Query(ctx, s.db.q.get, ref.Thread, ref.NS, nullable(ref.ID), have)
	if err != nil {
		return nil, s.readErr("get", ref.Thread, err)
	}
	var (
		row    *cpRow
		writes []writeRowRead
		blobs  = map[blobKey]*blobRead{}
		stops  = map[string]string{}
	)
	for rows.Next() {
		var (
			kind      int
			a         string
			b, e      *string
			n         int64
			c, d      string
			j, k, crc []byte
			m         *string
			depth     *int64
		)
		if err := rows.Scan(&kind, &a, &b, &n, &c, &d, &j, &k, &e, &crc, &m, &depth); err != nil {
			rows.Close()
			return nil, s.readErr("get", ref.Thread, err)
		}
		switch kind {
		case 0:
			row = &cpRow{thread: ref.Thread, ns: ref.NS, id: a, parent: b, step: n, source: c, created: d, metadata: j, vers: k, crc: crc, parentStep: depth, metaText: m}
			if e != nil {
				row.mark = *e
			}
		case 1:
			writes = append(writes, writeRowRead{thread: ref.Thread, ns: ref.NS, task: a, channel: *b, idx: n, node: c, path: d, value: j, crc: crc})
		case 2:
			br := &blobRead{thread: ref.Thread, ns: ref.NS, channel: a, version: *b, kind: c, base: d, value: j, crc: crc, stop: e}
			blobs[blobKey{ref.NS, a, *b}] = br
			if e != nil {
				stops[a] = *e
			}
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, s.readErr("get", ref.Thread, err)
	}
	if row == nil {
		return nil, fmt.Errorf("%w: %s", checkpoint.ErrNotFound, ref)
	}
	for i := range writes {
		writes[i].id = row.id
	}
	tp, err := s.tuple(row, writes, blobs, opts.Have)
	if err != nil {
		return nil, err
	}
	return tp, nil
}

// tuple assembles and verifies a tuple from its rows; have is the
// caller's GetOptions.Have (nil: every channel).
func (s *Saver) tuple(row *cpRow, writes []writeRowRead, blobs map[blobKey]*blobRead, have map[string]string) (*checkpoint.Tuple, error) {
	cp, err := row.checkpoint()
	if err != nil {
		return nil, err
	}
	cp.Channels = make(map[string][]checkpoint.Blob, len(cp.Versions))
	for ch, v := range cp.Versions {
		if hv, ok := have[ch]; ok && hv == v {
			continue
		}
		c, err := chain(blobs, row.ns, ch, v, have[ch])
		if err != nil {
			return nil, &checkpoint.CorruptError{Thread: row.thread, Checkpoint: cp.ID, What: "channel " + ch, Err: err}
		}
		cp.Channels[ch] = c
	}
	tp := &checkpoint.Tuple{Thread: row.thread, NS: row.ns, Checkpoint: cp}
	sortWrites(writes)
	for i := range writes {
		pw, err := writes[i].pending()
		if err != nil {
			return nil, err
		}
		tp.Pending = append(tp.Pending, pw)
	}
	if err := checkpoint.VerifyTuple(tp); err != nil {
		return nil, err
	}
	if row.parentStep != nil {
		if err := checkpoint.VerifyStep(row.thread, &tp.Checkpoint, int(*row.parentStep)); err != nil {
			return nil, err
		}
	}
	return tp, nil
}

// readErr maps a failed read to the saver's errors.
func (s *Saver) readErr(op, thread string, err error) error {
	if s.db.closed.Load() {
		return checkpoint.ErrClosed
	}
	return storeErr(op, thread, err, false)
}

// List implements checkpoint.Saver. In one repeatable-read transaction it
// reads the thread's checkpoint rows (filtered by opts, newest first),
// and then, unless opts.MetadataOnly, their pending writes and the blobs
// their channels need, sharing decoded blobs between tuples. It returns
// an error wrapping checkpoint.ErrInvalid for an empty thread or a bad
// filter key, a *checkpoint.CorruptError for a row that fails its checksum
// or does not decode, checkpoint.ErrClosed, ctx's error, or a
// *StoreError.
func (s *Saver) List(ctx context.Context, thread string, opts checkpoint.ListOptions) ([]*checkpoint.Tuple, error) {
	if thread == "" {
		return nil, fmt.Errorf("%w: empty thread ID", checkpoint.ErrInvalid)
	}
	for k := range opts.Filter {
		if !checkpoint.ValidFilterKey(k) {
			return nil, fmt.Errorf("%w: filter key %q is not [A-Za-z0-9_]{1,64}", checkpoint.ErrInvalid, k)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := s.live(); err != nil {
		return nil, err
	}
	var out []*checkpoint.Tuple
	err := s.readTx(ctx, func(tx pgx.Tx) error {
		var err error
		out, err = s.list(ctx, tx, thread, opts)
		return err
	})
	if err != nil {
		var ce *checkpoint.CorruptError
		if errors.As(err, &ce) || errors.Is(err, checkpoint.ErrInvalid) {
			return nil, err
		}
		return nil, s.readErr("list", thread, err)
	}
	return out, nil
}

// readTx runs fn in a read-only repeatable-read transaction: one
// snapshot for several statements.
func (s *Saver) readTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	tx, err := s.db.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read-only
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

func (s *Saver) list(ctx context.Context, tx pgx.Tx, thread string, opts checkpoint.ListOptions) ([]*checkpoint.Tuple, error) {
	rows, err := tx.Query(ctx, s.db.q.list, thread, opts.NS, opts.AllNamespaces, nullable(opts.Before))
	if err != nil {
		return nil, err
	}
	var all []*cpRow
	for rows.Next() {
		r := &cpRow{thread: thread}
		if err := rows.Scan(&r.ns, &r.id, &r.parent, &r.step, &r.source, &r.created, &r.metadata, &r.vers, &r.mark, &r.crc, &r.metaText); err != nil {
			rows.Close()
			return nil, err
		}
		all = append(all, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	// Newest first; the same ID in several namespaces by namespace (Go's
	// byte order, as every saver sorts).
	sort.SliceStable(all, func(i, j int) bool {
		if all[i].id != all[j].id {
			return all[i].id > all[j].id
		}
		return all[i].ns < all[j].ns
	})
	steps := map[blobKey]int64{} // (ns, "", id) → step
	for _, r := range all {
		steps[blobKey{r.ns, "", r.id}] = r.step
	}
	type picked struct {
		row *cpRow
		cp  checkpoint.Checkpoint
	}
	var sel []picked
	for _, r := range all {
		cp, err := r.checkpoint()
		if err != nil {
			return nil, err
		}
		if !checkpoint.MetadataMatches(cp.Metadata, opts.Filter) {
			continue
		}
		sel = append(sel, picked{r, cp})
		if opts.Limit > 0 && len(sel) == opts.Limit {
			break
		}
	}
	out := make([]*checkpoint.Tuple, 0, len(sel))
	if opts.MetadataOnly {
		for _, p := range sel {
			tp := &checkpoint.Tuple{Thread: thread, NS: p.row.ns, Checkpoint: p.cp}
			if err := checkpoint.VerifyCheckpoint(thread, &tp.Checkpoint); err != nil {
				return nil, err
			}
			out = append(out, tp)
		}
		return out, nil
	}
	if len(sel) == 0 {
		return out, nil
	}
	nss, ids := make([]string, len(sel)), make([]string, len(sel))
	var bns, bch, bver []string
	seen := map[blobKey]bool{}
	for i, p := range sel {
		nss[i], ids[i] = p.row.ns, p.row.id
		for ch, v := range p.cp.Versions {
			k := blobKey{p.row.ns, ch, v}
			if !seen[k] {
				seen[k] = true
				bns, bch, bver = append(bns, k.ns), append(bch, ch), append(bver, v)
			}
		}
	}
	b := &pgx.Batch{}
	b.Queue(s.db.q.listWrites, thread, nss, ids)
	b.Queue(s.db.q.listBlobs, thread, bns, bch, bver)
	br := tx.SendBatch(ctx, b)
	wrows, err := br.Query()
	if err != nil {
		br.Close()
		return nil, err
	}
	writes := map[blobKey][]writeRowRead{}
	for wrows.Next() {
		w := writeRowRead{thread: thread}
		var idx int32
		if err := wrows.Scan(&w.ns, &w.id, &w.task, &idx, &w.channel, &w.node, &w.path, &w.value, &w.crc); err != nil {
			wrows.Close()
			br.Close()
			return nil, err
		}
		w.idx = int64(idx)
		k := blobKey{w.ns, "", w.id}
		writes[k] = append(writes[k], w)
	}
	wrows.Close()
	if err := wrows.Err(); err != nil {
		br.Close()
		return nil, err
	}
	brows, err := br.Query()
	if err != nil {
		br.Close()
		return nil, err
	}
	blobs := map[blobKey]*blobRead{}
	for brows.Next() {
		bl := &blobRead{thread: thread}
		if err := brows.Scan(&bl.ns, &bl.channel, &bl.version, &bl.kind, &bl.base, &bl.value, &bl.crc); err != nil {
			brows.Close()
			br.Close()
			return nil, err
		}
		blobs[blobKey{bl.ns, bl.channel, bl.version}] = bl
	}
	brows.Close()
	if err := brows.Err(); err != nil {
		br.Close()
		return nil, err
	}
	if err := br.Close(); err != nil {
		return nil, err
	}
	for _, p := range sel {
		r := p.row
		if r.parent != nil {
			if st, ok := steps[blobKey{r.ns, "", *r.parent}]; ok {
				r.parentStep = &st
			}
		}
		tp, err := s.tuple(r, writes[blobKey{r.ns, "", r.id}], blobs, nil)
		if err != nil {
			return nil, err
		}
		out = append(out, tp)
	}
	return out, nil
}

// Threads implements checkpoint.ThreadLister: one statement. It fails
// with ctx's error, checkpoint.ErrClosed, a *checkpoint.CorruptError for
// a head row that fails its checksum, or a *StoreError.
func (s *Saver) Threads(ctx context.Context, offset, limit int) ([]checkpoint.ThreadInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := s.live(); err != nil {
		return nil, err
	}
	var lim any
	if limit > 0 {
		lim = int64(limit)
	}
	rows, err := s.db.pool.Query(ctx, s.db.q.threads, int64(max(offset, 0)), lim)
	if err != nil {
		return nil, s.readErr("threads", "", err)
	}
	defer rows.Close()
	var out []checkpoint.ThreadInfo
	for rows.Next() {
		r := &cpRow{}
		var updated int64
		if err := rows.Scan(&r.thread, &updated, &r.id, &r.parent, &r.step, &r.source, &r.created, &r.metadata, &r.vers, &r.mark, &r.crc, &r.metaText); err != nil {
			return nil, s.readErr("threads", "", err)
		}
		cp, err := r.checkpoint()
		if err != nil {
			return nil, err
		}
		out = append(out, checkpoint.ThreadInfo{Thread: r.thread, Head: cp.ID, Step: cp.Metadata.Step, Source: cp.Metadata.Source, UpdatedAt: time.Unix(0, updated).UTC()})
	}
	if err := rows.Err(); err != nil {
		return nil, s.readErr("threads", "", err)
	}
	return out, nil
}

// Lease implements checkpoint.LeaseInspector. It returns an error
// wrapping checkpoint.ErrInvalid for an empty thread, one matching
// checkpoint.ErrNotFound when the database holds nothing of the thread,
// checkpoint.ErrClosed, ctx's error, or a *StoreError.
func (s *Saver) Lease(ctx context.Context, thread, ns string) (checkpoint.LeaseInfo, error) {
	if thread == "" {
		return checkpoint.LeaseInfo{}, fmt.Errorf("%w: empty thread ID", checkpoint.ErrInvalid)
	}
	if err := ctx.Err(); err != nil {
		return checkpoint.LeaseInfo{}, err
	}
	if err := s.live(); err != nil {
		return checkpoint.LeaseInfo{}, err
	}
	var owner, runner *string
	var epoch int64
	var until *int64
	err := s.db.pool.QueryRow(ctx, s.db.q.lease, thread).Scan(&owner, &runner, &epoch, &until)
	if errors.Is(err, pgx.ErrNoRows) {
		return checkpoint.LeaseInfo{}, fmt.Errorf("%w: thread %q", checkpoint.ErrNotFound, thread)
	}
	if err != nil {
		return checkpoint.LeaseInfo{}, s.readErr("lease", thread, err)
	}
	info := checkpoint.LeaseInfo{Thread: thread, NS: ns, Epoch: uint64(epoch)}
	if owner != nil {
		info.Owner = *owner
		if runner != nil {
			info.Runner = *runner
		}
		if until != nil {
			info.Until = time.Unix(0, *until).UTC()
		}
	}
	return info, nil
}

var _ checkpoint.RunnerLeases = (*Saver)(nil)

// LeasedBy implements checkpoint.RunnerLeases: one query over the threads
// table (a pool runs it once when it starts). It returns an error
// wrapping checkpoint.ErrInvalid for an empty runner or a negative limit,
// ctx's error, checkpoint.ErrClosed, or a *StoreError.
func (s *Saver) LeasedBy(ctx context.Context, runner string, limit int) ([]checkpoint.LeaseInfo, error) {
	if err := checkpoint.ValidateLeasedBy(runner, limit); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := s.live(); err != nil {
		return nil, err
	}
	var lim *int64
	if limit > 0 {
		n := int64(limit)
		lim = &n
	}
	rows, err := s.db.pool.Query(ctx, s.db.q.leasedBy, runner, s.db.now().UnixNano(), lim)
	if err != nil {
		return nil, s.readErr("leases of runner", "", err)
	}
	defer rows.Close()
	var out []checkpoint.LeaseInfo
	for rows.Next() {
		l := checkpoint.LeaseInfo{Runner: runner}
		var epoch, until int64
		if err := rows.Scan(&l.Thread, &l.Owner, &epoch, &until); err != nil {
			return nil, s.readErr("leases of runner", "", err)
		}
		l.Epoch, l.Until = uint64(epoch), time.Unix(0, until).UTC()
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, s.readErr("leases of runner", "", err)
	}
	return out, nil
}

// PendingInterrupts implements checkpoint.InterruptLister: it walks the
// interrupt writes on the root heads in the order they were first saved
// (the writes table's seq, which a write saved again keeps), and reads
// each head's writes to tell which interrupts still wait. The cursor is
// "<seq>|<thread>|<interrupt ID>" of the last item. It returns an error
// wrapping checkpoint.ErrInvalid for a malformed cursor, a
// *checkpoint.CorruptError for a write that does not decode, ctx's error,
// checkpoint.ErrClosed, or a *StoreError.
func (s *Saver) PendingInterrupts(ctx context.Context, q checkpoint.InterruptQuery) ([]checkpoint.PendingInterrupt, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	if err := s.live(); err != nil {
		return nil, "", err
	}
	afterSeq, afterThread, afterID, err := parseCursor(q.After)
	if err != nil {
		return nil, "", err
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 100
	}
	type item struct {
		seq    int64
		thread string
		pi     checkpoint.PendingInterrupt
	}
	var out []item
	from := afterSeq
	const pageSize = 256
	exhausted := false
	for len(out) <= limit && !exhausted {
		rows, err := s.db.pool.Query(ctx, s.db.q.interruptWrites, from, int64(pageSize))
		if err != nil {
			return nil, "", s.readErr("pending interrupts", "", err)
		}
		type iw struct {
			thread, cp, task string
			seq, created     int64
		}
		var page []iw
		for rows.Next() {
			var w iw
			if err := rows.Scan(&w.thread, &w.cp, &w.task, &w.seq, &w.created); err != nil {
				rows.Close()
				return nil, "", s.readErr("pending interrupts", "", err)
			}
			page = append(page, w)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, "", s.readErr("pending interrupts", "", err)
		}
		exhausted = len(page) < pageSize
		if len(page) == 0 {
			break
		}
		from = page[len(page)-1].seq + 1
		// The writes of every head the page touches, in one query.
		var ths, cps []string
		seenCP := map[[2]string]bool{}
		for _, w := range page {
			k := [2]string{w.thread, w.cp}
			if !seenCP[k] {
				seenCP[k] = true
				ths, cps = append(ths, w.thread), append(cps, w.cp)
			}
		}
		wr, err := s.db.pool.Query(ctx, s.db.q.headWrites, ths, cps)
		if err != nil {
			return nil, "", s.readErr("pending interrupts", "", err)
		}
		byCP := map[[2]string][]writeRowRead{}
		for wr.Next() {
			var w writeRowRead
			var idx int32
			if err := wr.Scan(&w.thread, &w.id, &w.task, &idx, &w.channel, &w.node, &w.path, &w.value, &w.crc); err != nil {
				wr.Close()
				return nil, "", s.readErr("pending interrupts", "", err)
			}
			w.idx = int64(idx)
			k := [2]string{w.thread, w.id}
			byCP[k] = append(byCP[k], w)
		}
		wr.Close()
		if err := wr.Err(); err != nil {
			return nil, "", s.readErr("pending interrupts", "", err)
		}
		pending := map[[2]string][]checkpoint.PendingInterrupt{}
		for k, ws := range byCP {
			sortWrites(ws)
			pws := make([]checkpoint.PendingWrite, 0, len(ws))
			for i := range ws {
				pw, err := ws[i].pending()
				if err != nil {
					return nil, "", err
				}
				pws = append(pws, pw)
			}
			pis, err := checkpoint.PendingInterrupts(k[0], k[1], pws)
			if err != nil {
				return nil, "", err
			}
			pending[k] = pis
		}
		for _, w := range page {
			for _, pi := range pending[[2]string{w.thread, w.cp}] {
				if pi.TaskID != w.task {
					continue
				}
				if w.seq == afterSeq && (w.thread < afterThread || w.thread == afterThread && pi.InterruptID <= afterID) {
					continue
				}
				pi.Thread, pi.NS, pi.CheckpointID, pi.CreatedAt = w.thread, "", w.cp, time.Unix(0, w.created).UTC()
				out = append(out, item{w.seq, w.thread, pi})
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.seq != b.seq {
			return a.seq < b.seq
		}
		if a.thread != b.thread {
			return a.thread < b.thread
		}
		return a.pi.InterruptID < b.pi.InterruptID
	})
	next := ""
	if len(out) > limit {
		out = out[:limit]
		last := out[len(out)-1]
		next = fmt.Sprintf("%020d|%s|%s", last.seq, strconv.Quote(last.thread), strconv.Quote(last.pi.InterruptID))
	}
	res := make([]checkpoint.PendingInterrupt, len(out))
	for i, it := range out {
		res[i] = it.pi
	}
	return res, next, nil
}

// parseCursor reads a PendingInterrupts cursor.
func parseCursor(c string) (seq int64, thread, id string, err error) {
	if c == "" {
		return 0, "", "", nil
	}
	bad := fmt.Errorf("%w: malformed interrupt cursor %q", checkpoint.ErrInvalid, c)
	n, rest, ok := strings.Cut(c, "|")
	seq, perr := strconv.ParseInt(n, 10, 64)
	if !ok || perr != nil || seq < 0 {
		return 0, "", "", bad
	}
	qt, err := strconv.QuotedPrefix(rest)
	if err != nil || !strings.HasPrefix(rest[len(qt):], "|") {
		return 0, "", "", bad
	}
	qi := rest[len(qt)+1:]
	if thread, err = strconv.Unquote(qt); err != nil {
		return 0, "", "", bad
	}
	if id, err = strconv.Unquote(qi); err != nil {
		return 0, "", "", bad
	}
	return seq, thread, id, nil
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

func sortStrings(s []string) { slices.Sort(s) }
