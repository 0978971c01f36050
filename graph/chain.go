package graph

import (
	"context"
	"math"
	"reflect"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// This file chooses how an append field's new items are stored, so that
// reading the field's latest value costs about one read of the value,
// however many times it was appended to, while the bytes stored stay
// proportional to the bytes written (architecture decision D4).
//
// A saver returns a field's value as its chain of blobs: back from the
// field's version along Base links to a blob holding a whole value (or to
// an append to nothing). Appending one blob per checkpoint makes that
// chain as long as the history. So a Put stores, instead of the new
// items alone:
//
//   - the whole value (a snapshot), once the bytes the chain holds past
//     its start reach the size of its start (at least snapshotMin):
//     snapshots grow geometrically, so together they are at most about
//     twice the final value;
//   - the items since the chain's last boundary (a segment: an append
//     whose Base is that boundary, not the previous version), once the
//     small blobs since it reach segmentSize of the start: each item is
//     copied into at most one segment, and a chain holds at most about
//     sqrt(start/1 KiB) segments and as many small blobs.
//
// Every blob is still an ordinary checkpoint.Blob (a value, or an append
// to an earlier version), so every saver stores and reads these chains
// as it always has, and chains written before this scheme read as before.

// snapshotMin is the smallest value stored as a snapshot: a field's chain
// starts over only once it holds this many bytes.
const snapshotMin = 64 << 10

// segmentUnit scales segment sizes: a chain whose start holds S bytes
// gathers its small blobs into segments of sqrt(S*segmentUnit) bytes.
const segmentUnit = 1 << 10

// chainShape is what a Put needs to know of the stored chain of an append
// field's value: where it starts, how many bytes it holds past its start,
// and its last boundary (the last blob at least segmentSize long, or the
// start), with the bytes of the small blobs after it. A read rebuilds it
// from the blobs it decodes; known is false when no read or Put built it.
type chainShape struct {
	known    bool
	items    int    // items in the value
	start    int    // bytes of the blob the chain starts at (0: an append to nothing)
	tail     int    // bytes of the blobs after the start
	boundary string // version of the last boundary ("" for none: the empty value)
	atItems  int    // items in the value at the boundary
	run      int    // bytes of the blobs after the boundary
}

// fullShape is the shape of a chain that starts at a whole value.
func fullShape(version string, items, size int) chainShape {
	return chainShape{known: true, items: items, start: size, boundary: version, atItems: items}
}

// segmentSize is the size at which a blob is a boundary of a chain whose
// start holds start bytes.
func segmentSize(start int) int {
	return int(math.Sqrt(float64(max(start, snapshotMin)) * segmentUnit))
}

// extend returns the shape of the chain c followed by a blob of size
// bytes at version that leaves the value with items items. An unknown
// shape stays unknown.
func (c chainShape) extend(version string, items, size int) chainShape {
	if !c.known {
		return c
	}
	c.items = items
	c.tail += size
	if size >= segmentSize(c.start) {
		c.boundary, c.atItems, c.run = version, items, 0
	} else {
		c.run += size
	}
	return c
}

// encodeAppend fills b, the blob of append field fl at version id, whose
// value fv has the changes d since the frame's version old, whose chain
// has shape c. It returns the shape of the chain b ends.
func (r *Runnable[S]) encodeAppend(ctx context.Context, b *checkpoint.Blob, fl *field, fv reflect.Value, d dirtyMark, old string, c chainShape, id string) (chainShape, error) {
	w := where{prefix: "field", field: fl.name}
	n := fv.Len()
	full := func() (chainShape, error) {
		data, err := encodeValue(ctx, r.abandoned, fv, fl, w, r.cfg.maxValueBytes)
		if err != nil {
			return chainShape{}, err
		}
		b.Append, b.Base, b.Data = false, "", data
		return fullShape(id, n, len(data)), nil
	}
	if d.full {
		return full()
	}
	data, err := encodeValue(ctx, r.abandoned, fv.Slice(d.from, n), fl, w, r.cfg.maxValueBytes)
	if err != nil {
		return chainShape{}, err
	}
	b.Append, b.Base, b.Data = true, old, data
	if !c.known && old == "" && d.from == 0 {
		c = chainShape{known: true}
	}
	if !c.known || c.items != d.from || c.boundary == "" && c.atItems != 0 {
		// A chain whose shape no read or Put recorded: stored as it
		// always was.
		return chainShape{}, nil
	}
	switch {
	case c.tail+len(data) >= max(c.start, snapshotMin):
		return full()
	case len(data) < segmentSize(c.start) && c.run+len(data) >= segmentSize(c.start) && c.atItems < d.from:
		seg, err := encodeValue(ctx, r.abandoned, fv.Slice(c.atItems, n), fl, w, r.cfg.maxValueBytes)
		if err != nil {
			return chainShape{}, err
		}
		b.Base, b.Data = c.boundary, seg
		c.tail -= c.run
		c.run = 0
		return c.extend(id, n, len(seg)), nil
	}
	return c.extend(id, n, len(data)), nil
}
