package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockstepgo/lockstep/checkpoint"
)

var _ checkpoint.TopologyStore = (*Saver)(nil)

const (
	// topologyLockSQL serializes the stores of one name (in this schema)
	// until the transaction ends, so that stored_seq grows in the order
	// the stores commit: the newest topology of a name is the one stored
	// last (checkpoint.TopologyStore).
	topologyLockSQL = `SELECT pg_advisory_xact_lock(hashtextextended($1::text, 0))`
	// putTopologySQL inserts a fingerprint's row, or moves an existing
	// one of the same name to the top of its name's order; it returns no
	// row when the fingerprint is stored under another name.
	//
	//	$1 fingerprint  $2 name  $3 data  $4 now
	putTopologySQL = `INSERT INTO $S.topologies AS t (fingerprint, name, data, created_at, stored_at, stored_seq)
VALUES ($1::text, $2::text, $3::text, $4::text, $4::text, (SELECT coalesce(max(stored_seq), 0) + 1 FROM $S.topologies WHERE name = $2::text))
ON CONFLICT (fingerprint) DO UPDATE SET stored_at = excluded.stored_at, stored_seq = excluded.stored_seq
WHERE t.name = excluded.name
RETURNING 1`
	topologyNameSQL   = `SELECT name FROM $S.topologies WHERE fingerprint = $1::text`
	getTopologySQL    = `SELECT fingerprint, name, data, created_at, stored_at FROM $S.topologies WHERE fingerprint = $1::text`
	latestTopologySQL = `SELECT fingerprint, name, data, created_at, stored_at FROM $S.topologies WHERE name = $1::text ORDER BY stored_seq DESC LIMIT 1`
)

// PutTopology implements checkpoint.TopologyStore: one row per
// fingerprint in the topologies table, inserted by the first store and
// given the next stored_seq of its name (and the saver's time as
// stored_at) by every store, in one transaction that holds a
// transaction-scoped advisory lock on the name. It returns an error
// wrapping checkpoint.ErrInvalid for a topology
// checkpoint.ValidateTopology refuses or a fingerprint stored under
// another name, one matching checkpoint.ErrInvalid and ErrUnsupported for
// data whose strings hold U+0000 (JSONB cannot hold it),
// checkpoint.ErrClosed, ctx's error, or a *StoreError; nothing is
// written on any of them.
func (s *Saver) PutTopology(ctx context.Context, t checkpoint.Topology) error {
	if err := checkpoint.ValidateTopology(&t); err != nil {
		return err
	}
	if err := storable(t.Data); err != nil {
		return fmt.Errorf("%w: topology %s of graph %q: %w", checkpoint.ErrInvalid, t.Fingerprint, t.Name, err)
	}
	if err := s.live(); err != nil {
		return err
	}
	now := formatTime(s.db.now())
	op := "put topology " + t.Fingerprint
	tx, err := s.db.pool.Begin(ctx)
	if err != nil {
		return s.writeErr(op, "", err, nil)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	if _, err := tx.Exec(ctx, topologyLockSQL, "lockstep/topology/"+s.db.schema+"/"+t.Name); err != nil {
		return s.writeErr(op, "", err, nil)
	}
	var one int
	err = tx.QueryRow(ctx, s.db.q.putTopology, t.Fingerprint, t.Name, string(t.Data), now).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		var name string
		if err := tx.QueryRow(ctx, s.db.q.topologyName, t.Fingerprint).Scan(&name); err != nil {
			return s.writeErr(op, "", err, nil)
		}
		return fmt.Errorf("%w: topology %s is stored as graph %q, not %q", checkpoint.ErrInvalid, t.Fingerprint, name, t.Name)
	}
	if err != nil {
		return s.writeErr(op, "", err, nil)
	}
	if err := tx.Commit(ctx); err != nil {
		return s.writeErr(op, "", err, nil)
	}
	return nil
}

// Topology implements checkpoint.TopologyStore. It returns an error
// matching checkpoint.ErrNotFound when the schema holds no topology under
// fingerprint, one wrapping checkpoint.ErrInvalid for a string that is
// not a fingerprint, a *checkpoint.CorruptError when the stored row does
// not hash to its fingerprint or its times do not parse,
// checkpoint.ErrClosed, ctx's error, or a *StoreError.
func (s *Saver) Topology(ctx context.Context, fingerprint string) (checkpoint.Topology, error) {
	if !checkpoint.ValidFingerprint(fingerprint) {
		return checkpoint.Topology{}, fmt.Errorf("%w: %q is not a topology fingerprint", checkpoint.ErrInvalid, fingerprint)
	}
	return s.readTopology(ctx, "get topology "+fingerprint, s.db.q.getTopology, fingerprint, func() error {
		return fmt.Errorf("%w: no topology %s in schema %q", checkpoint.ErrNotFound, fingerprint, s.db.schema)
	})
}

// LatestTopology implements checkpoint.TopologyStore: the row of name
// with the largest stored_seq. It returns an error matching
// checkpoint.ErrNotFound when the schema holds no topology of name, one
// wrapping checkpoint.ErrInvalid for an empty name, and otherwise what
// Topology returns.
func (s *Saver) LatestTopology(ctx context.Context, name string) (checkpoint.Topology, error) {
	if name == "" {
		return checkpoint.Topology{}, fmt.Errorf("%w: empty graph name", checkpoint.ErrInvalid)
	}
	return s.readTopology(ctx, "get latest topology", s.db.q.latestTopology, name, func() error {
		return fmt.Errorf("%w: no topology of graph %q in schema %q", checkpoint.ErrNotFound, name, s.db.schema)
	})
}

// readTopology reads the one row query selects with arg; notFound makes
// the error for none.
func (s *Saver) readTopology(ctx context.Context, op, query, arg string, notFound func() error) (checkpoint.Topology, error) {
	if err := s.live(); err != nil {
		return checkpoint.Topology{}, err
	}
	var t checkpoint.Topology
	var data, created, stored string
	err := s.db.pool.QueryRow(ctx, query, arg).Scan(&t.Fingerprint, &t.Name, &data, &created, &stored)
	if errors.Is(err, pgx.ErrNoRows) {
		return checkpoint.Topology{}, notFound()
	}
	if err != nil {
		return checkpoint.Topology{}, s.readErr(op, "", err)
	}
	t.Data = []byte(data)
	if err := checkpoint.CheckStoredTopology(t); err != nil {
		return checkpoint.Topology{}, err
	}
	var perr error
	if t.CreatedAt, perr = readTime(created); perr == nil {
		t.StoredAt, perr = readTime(stored)
	}
	if perr != nil {
		return checkpoint.Topology{}, &checkpoint.CorruptError{What: fmt.Sprintf("topology %s of graph %q", t.Fingerprint, t.Name), Err: perr}
	}
	return t, nil
}

// readTime parses a time the stores wrote with formatTime, refusing any
// other spelling of it.
func readTime(s string) (time.Time, error) {
	t, err := parseTime(s)
	if err != nil {
		return time.Time{}, err
	}
	if formatTime(t) != s {
		return time.Time{}, fmt.Errorf("%q is not a time as the store writes it", s)
	}
	return t, nil
}
