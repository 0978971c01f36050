package checkpoint

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"
)

// TopologyStore is implemented by savers that keep the topologies of the
// graphs that write to them, so that a tool holding only the database can
// draw the graph a thread ran under and tell that a thread was saved under
// another graph than the one that runs now (see package graph: a compiled
// graph stores its topology the first time it writes to a saver, and every
// checkpoint it writes names it in Metadata.Topology). Each distinct
// topology is stored once per saver, under its fingerprint
// (content-addressed), however many threads and runs wrote under it.
//
// A saver orders the stores of one name: the newest topology of a name is
// the one whose latest PutTopology committed last. Storing a topology again
// (a process that starts with an older version of the graph, as after a
// rollback) makes it the newest again.
type TopologyStore interface {
	// PutTopology stores t.Data under t.Fingerprint and t.Name, and makes
	// it the newest topology of t.Name. Storing a fingerprint already
	// stored keeps its data and CreatedAt and moves only StoredAt (to the
	// saver's clock) and its place in the order. The saver sets CreatedAt
	// and StoredAt; the caller's are ignored. It returns an error wrapping
	// ErrInvalid, writing nothing, when t fails ValidateTopology or its
	// fingerprint is stored under another name.
	PutTopology(ctx context.Context, t Topology) error

	// Topology returns the topology stored under fingerprint. It returns
	// an error matching ErrNotFound when there is none (also when the
	// saver's storage predates topologies), one wrapping ErrInvalid for a
	// string that is not a fingerprint (ValidFingerprint), and a
	// *CorruptError when the stored data does not hash to its fingerprint.
	Topology(ctx context.Context, fingerprint string) (Topology, error)

	// LatestTopology returns the newest topology stored under name (see
	// TopologyStore). It returns an error matching ErrNotFound when none
	// is, one wrapping ErrInvalid for an empty name, and a *CorruptError
	// as Topology does.
	LatestTopology(ctx context.Context, name string) (Topology, error)
}

// Topology is a graph's topology as a saver stores it: the canonical
// encoding package graph writes (graph.Topology), opaque to savers, with
// its fingerprint and the graph's name.
type Topology struct {
	// Fingerprint is TopologyFingerprint(Data).
	Fingerprint string
	// Name is the name of the graph (graph.WithName): the topologies of
	// one name are versions of one graph. 1 to MaxTopologyNameBytes of
	// UTF-8 without control characters.
	Name string
	// Data is the topology, a JSON object of at most MaxTopologyBytes.
	Data json.RawMessage
	// CreatedAt is when the fingerprint was first stored, StoredAt when
	// it was last stored; both set by the saver, from its clock.
	CreatedAt time.Time
	StoredAt  time.Time
}

// Limits of a Topology.
const (
	MaxTopologyBytes     = 1 << 20
	MaxTopologyNameBytes = 256
)

// fingerprintHexLen is the length of a fingerprint: 128 bits in hex.
const fingerprintHexLen = 32

// TopologyFingerprint returns the fingerprint of a topology's encoding:
// the first 128 bits of its SHA-256, as 32 lowercase hex digits. Equal
// encodings have equal fingerprints in every process; package graph
// writes a canonical encoding, so that equal topologies have equal
// encodings.
func TopologyFingerprint(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:fingerprintHexLen/2])
}

// ValidFingerprint reports whether s has the form of a fingerprint
// (TopologyFingerprint): 32 lowercase hex digits.
func ValidFingerprint(s string) bool {
	if len(s) != fingerprintHexLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// ValidateTopology checks what PutTopology stores of t: a name of 1 to
// MaxTopologyNameBytes of UTF-8 without control characters, Data a JSON
// object of at most MaxTopologyBytes, and Fingerprint equal to
// TopologyFingerprint(Data). It returns an error wrapping ErrInvalid that
// says which rule t breaks. Savers share the rule through it.
func ValidateTopology(t *Topology) error {
	if err := ValidTopologyName(t.Name); err != nil {
		return err
	}
	switch {
	case len(t.Data) > MaxTopologyBytes:
		return fmt.Errorf("%w: topology %q of graph %q: %d bytes (at most %d)", ErrInvalid, t.Fingerprint, t.Name, len(t.Data), MaxTopologyBytes)
	case !json.Valid(t.Data) || !bytes.HasPrefix(bytes.TrimLeft(t.Data, " \t\r\n"), []byte("{")):
		return fmt.Errorf("%w: topology %q of graph %q: the data is not a JSON object", ErrInvalid, t.Fingerprint, t.Name)
	case !ValidFingerprint(t.Fingerprint):
		return fmt.Errorf("%w: topology of graph %q: %q is not a fingerprint (%d lowercase hex digits)", ErrInvalid, t.Name, t.Fingerprint, fingerprintHexLen)
	case TopologyFingerprint(t.Data) != t.Fingerprint:
		return fmt.Errorf("%w: topology %q of graph %q: the data hashes to %s, not to its fingerprint", ErrInvalid, t.Fingerprint, t.Name, TopologyFingerprint(t.Data))
	}
	return nil
}

// ValidTopologyName checks a graph's name: 1 to MaxTopologyNameBytes of
// UTF-8 without control characters. It returns an error wrapping
// ErrInvalid.
func ValidTopologyName(name string) error {
	if name == "" || len(name) > MaxTopologyNameBytes || !utf8.ValidString(name) {
		return fmt.Errorf("%w: a graph name is 1 to %d bytes of UTF-8", ErrInvalid, MaxTopologyNameBytes)
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0 {
			return fmt.Errorf("%w: graph name %q contains a control character", ErrInvalid, name)
		}
	}
	return nil
}

// CheckStoredTopology is what savers do with a topology they read back:
// it returns a *CorruptError when t.Data does not hash to t.Fingerprint
// (the stored data changed since it was stored), naming the fingerprint.
func CheckStoredTopology(t Topology) error {
	if got := TopologyFingerprint(t.Data); got != t.Fingerprint {
		return &CorruptError{What: fmt.Sprintf("topology %s of graph %q", t.Fingerprint, t.Name),
			Err: fmt.Errorf("its data hashes to %s", got)}
	}
	return nil
}
