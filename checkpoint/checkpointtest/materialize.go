package checkpointtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// Held is a channel value a reader already holds: the version it named in
// GetOptions.Have and the JSON value at that version.
type Held struct {
	Version string
	Value   json.RawMessage
}

// Materialize returns the JSON value of one channel from the chain of blobs
// a saver returned for it, oldest first. The chain starts at a complete
// value: a blob that is not an Append, an Append whose Base is "" (appended
// to the empty array), or, for a chain trimmed by GetOptions.Have, an
// Append whose Base is heldVersion, which extends held. Each later blob
// must be an Append whose Base is the Version of the blob before it; its
// items are concatenated. A null base or null items count as an empty
// array.
//
// It returns an error, and no value, when the chain is empty, does not start
// at a complete value, breaks a link, replaces the value after its first
// blob, holds invalid JSON, or appends to or with something that is not an
// array. The result is compact JSON; it may share memory with blobs.
func Materialize(blobs []checkpoint.Blob, heldVersion string, held json.RawMessage) (json.RawMessage, error) {
	if len(blobs) == 0 {
		return nil, errors.New("empty chain")
	}
	var (
		whole json.RawMessage   // the value, until something is appended to it
		items []json.RawMessage // the value as items, once something is
		isArr bool
	)
	for i, b := range blobs {
		if !json.Valid(b.Data) {
			return nil, fmt.Errorf("blob %s: data is not valid JSON: %q", b.Version, b.Data)
		}
		if !b.Append {
			if i > 0 {
				return nil, fmt.Errorf("blob %s replaces the value in the middle of a chain (position %d); a chain starts at its last replacement", b.Version, i)
			}
			whole = b.Data
			continue
		}
		switch {
		case i > 0:
			if b.Base != blobs[i-1].Version {
				return nil, fmt.Errorf("broken chain: blob %s extends %q, but the blob before it is %s", b.Version, b.Base, blobs[i-1].Version)
			}
		case b.Base == "":
			whole = json.RawMessage("[]")
		case heldVersion != "" && b.Base == heldVersion:
			if !json.Valid(held) {
				return nil, fmt.Errorf("held value at version %s is not valid JSON", heldVersion)
			}
			whole = held
		default:
			return nil, fmt.Errorf("chain starts at append %s on base %s, which the reader does not hold (held version %q)", b.Version, b.Base, heldVersion)
		}
		if !isArr {
			if err := json.Unmarshal(whole, &items); err != nil {
				return nil, fmt.Errorf("blob %s appends to a value that is not an array: %w", b.Version, err)
			}
			isArr = true
		}
		var more []json.RawMessage
		if err := json.Unmarshal(b.Data, &more); err != nil {
			return nil, fmt.Errorf("blob %s: appended items are not an array: %w", b.Version, err)
		}
		items = append(items, more...)
	}
	if isArr {
		if items == nil {
			items = []json.RawMessage{}
		}
		return json.Marshal(items)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, whole); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Values materialises every channel of a checkpoint returned by a saver,
// given the values the reader holds (what it passed as GetOptions.Have,
// with the values). A channel left out of Channels must be held at exactly
// its version in Versions; a channel with blobs must end at that version
// (see Materialize). It returns an error naming the first channel that
// does not rebuild, or a channel that has blobs but no version.
func Values(cp checkpoint.Checkpoint, held map[string]Held) (map[string]json.RawMessage, error) {
	chans := make([]string, 0, len(cp.Versions))
	for ch := range cp.Versions {
		chans = append(chans, ch)
	}
	sort.Strings(chans)
	for ch := range cp.Channels {
		if _, ok := cp.Versions[ch]; !ok {
			return nil, fmt.Errorf("channel %q has blobs but no version", ch)
		}
	}
	out := make(map[string]json.RawMessage, len(chans))
	for _, ch := range chans {
		v := cp.Versions[ch]
		blobs := cp.Channels[ch]
		h, isHeld := held[ch]
		if len(blobs) == 0 {
			if isHeld && h.Version == v {
				out[ch] = h.Value
				continue
			}
			return nil, fmt.Errorf("channel %q at version %s: no blobs, and the reader does not hold that version", ch, v)
		}
		if last := blobs[len(blobs)-1].Version; last != v {
			return nil, fmt.Errorf("channel %q at version %s: chain ends at version %s", ch, v, last)
		}
		if !isHeld {
			h = Held{}
		}
		val, err := Materialize(blobs, h.Version, h.Value)
		if err != nil {
			return nil, fmt.Errorf("channel %q at version %s: %w", ch, v, err)
		}
		out[ch] = val
	}
	return out, nil
}
