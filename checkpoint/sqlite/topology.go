package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// PutTopology implements checkpoint.TopologyStore: one row per
// fingerprint in the topologies table, inserted by the first store and
// given the next stored_seq of its name (and the saver's time as
// stored_at) by every store, in one BEGIN IMMEDIATE transaction. It
// returns an error wrapping checkpoint.ErrInvalid for a topology
// checkpoint.ValidateTopology refuses or a fingerprint stored under
// another name, a *SchemaError matching ErrSchemaTooOld on a schema-3 file
// opened with OpenExisting (which has no topologies table), and a
// *StoreError when SQLite fails; nothing is written on any of them.
func (s *Saver) PutTopology(ctx context.Context, t checkpoint.Topology) error {
	if err := checkpoint.ValidateTopology(&t); err != nil {
		return err
	}
	if err := s.live(); err != nil {
		return err
	}
	if s.version < topologySchema {
		return fmt.Errorf("store topology %s of graph %q: %w", t.Fingerprint, t.Name, &SchemaError{Path: s.cfg.path, File: s.version, Code: schemaVersion})
	}
	return s.write(ctx, opInfo{op: "put topology " + t.Fingerprint}, "", func(tx *wtx) error {
		now := formatTime(s.cfg.now())
		var name string
		err := tx.queryRow(`SELECT name FROM topologies WHERE fingerprint = ?`, t.Fingerprint).Scan(&name)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			_, err = tx.exec(`INSERT INTO topologies (fingerprint, name, topology, created_at, stored_at, stored_seq)
VALUES (?1, ?2, ?3, ?4, ?4, (SELECT coalesce(max(stored_seq), 0) + 1 FROM topologies WHERE name = ?2))`,
				t.Fingerprint, t.Name, string(t.Data), now)
			return err
		case err != nil:
			return err
		case name != t.Name:
			return errRollback{fmt.Errorf("%w: topology %s is stored as graph %q, not %q", checkpoint.ErrInvalid, t.Fingerprint, name, t.Name)}
		}
		_, err = tx.exec(`UPDATE topologies SET stored_at = ?1,
	stored_seq = (SELECT max(stored_seq) + 1 FROM topologies WHERE name = ?2) WHERE fingerprint = ?3`, now, t.Name, t.Fingerprint)
		return err
	})
}

// Topology implements checkpoint.TopologyStore. It returns an error
// matching checkpoint.ErrNotFound when the file holds no topology under
// fingerprint (or none at all: a schema-3 file opened with OpenExisting),
// one wrapping checkpoint.ErrInvalid for a string that is not a
// fingerprint, a *checkpoint.CorruptError when the stored row does not
// hash to its fingerprint or its times do not parse, and a *StoreError
// when SQLite fails.
func (s *Saver) Topology(ctx context.Context, fingerprint string) (checkpoint.Topology, error) {
	if !checkpoint.ValidFingerprint(fingerprint) {
		return checkpoint.Topology{}, fmt.Errorf("%w: %q is not a topology fingerprint", checkpoint.ErrInvalid, fingerprint)
	}
	return s.readTopology(ctx, "get topology "+fingerprint,
		`SELECT fingerprint, name, topology, created_at, stored_at FROM topologies WHERE fingerprint = ?`, fingerprint,
		func() error {
			return fmt.Errorf("%w: no topology %s in %s", checkpoint.ErrNotFound, fingerprint, strconv.Quote(s.cfg.path))
		})
}

// LatestTopology implements checkpoint.TopologyStore: the row of name
// with the largest stored_seq. It returns an error matching
// checkpoint.ErrNotFound when the file holds no topology of name, one
// wrapping checkpoint.ErrInvalid for an empty name, and otherwise what
// Topology returns.
func (s *Saver) LatestTopology(ctx context.Context, name string) (checkpoint.Topology, error) {
	if name == "" {
		return checkpoint.Topology{}, fmt.Errorf("%w: empty graph name", checkpoint.ErrInvalid)
	}
	return s.readTopology(ctx, "get latest topology",
		`SELECT fingerprint, name, topology, created_at, stored_at FROM topologies WHERE name = ? ORDER BY stored_seq DESC LIMIT 1`, name,
		func() error {
			return fmt.Errorf("%w: no topology of graph %q in %s", checkpoint.ErrNotFound, name, strconv.Quote(s.cfg.path))
		})
}

// readTopology reads the one row query selects with arg; notFound makes
// the error for none.
func (s *Saver) readTopology(ctx context.Context, op, query, arg string, notFound func() error) (checkpoint.Topology, error) {
	if err := s.live(); err != nil {
		return checkpoint.Topology{}, err
	}
	if s.version < topologySchema {
		return checkpoint.Topology{}, fmt.Errorf("%w (the file has schema %d, which stores no topologies)", notFound(), s.version)
	}
	var t checkpoint.Topology
	err := s.read(ctx, opInfo{op: op}, func(c *sql.Conn) error {
		var data, created, stored string
		err := c.QueryRowContext(ctx, query, arg).Scan(&t.Fingerprint, &t.Name, &data, &created, &stored)
		if errors.Is(err, sql.ErrNoRows) {
			return notFound()
		}
		if err != nil {
			return err
		}
		t.Data = []byte(data)
		if err := checkpoint.CheckStoredTopology(t); err != nil {
			return err
		}
		var perr error
		if t.CreatedAt, perr = parseTime(created); perr == nil {
			t.StoredAt, perr = parseTime(stored)
		}
		if perr != nil {
			return &checkpoint.CorruptError{What: fmt.Sprintf("topology %s of graph %q", t.Fingerprint, t.Name), Err: perr}
		}
		return nil
	})
	if err != nil {
		return checkpoint.Topology{}, err
	}
	return t, nil
}
