package sqlite

import "github.com/lockstepgo/lockstep/checkpoint"

// This file writes the links column of a checkpoints row (linksSchema):
// for each append blob the row's channels hold, the version it extends,
//
//	links  {"<channel>":"<base>", ...}   sorted by channel; '{}' when the row holds no append
//
// so that a read walks an append chain (chainLinks) through these few
// bytes rather than through each row's channels, whose first row is the
// whole value the chain starts at. Reads take every value from channels,
// which the row's checksum covers; links only chooses which rows a walk
// reads, and a walk that links sent astray is completed by ID through
// channels (rowSet.load), so links is not part of the checksum.

// noLinks is the links of a row that holds no append blob.
const noLinks = "{}"

// encodeLinks returns the links column of a row whose channels are chans
// (one blob each, as in a PutRequest). Channel names and versions are
// valid UTF-8 (encodeChannels and checkpoint.ValidatePut refuse others).
func encodeLinks(chans map[string][]checkpoint.Blob) string {
	n := 0
	for _, bs := range chans {
		if len(bs) > 0 && bs[0].Append {
			n += len(bs[0].Base) + 8
		}
	}
	if n == 0 {
		return noLinks
	}
	var stack [16]string
	b := make([]byte, 0, n+2+16*len(chans))
	b = append(b, '{')
	for _, ch := range appendSortedKeys(stack[:0], chans) {
		if bs := chans[ch]; len(bs) == 0 || !bs[0].Append {
			continue
		}
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = appendString(b, ch)
		b = append(b, ':')
		b = appendString(b, chans[ch][0].Base)
	}
	return string(append(b, '}'))
}

// linksOf returns the links column of a row holding the decoded channels
// chans, those keep keeps (a pruned row stripped to the channels kept
// chains need).
func linksOf(chans []chanBlob, keep func(string) bool) string {
	b := []byte{'{'}
	for _, e := range chans {
		if !keep(e.channel) || !e.blob.Append {
			continue
		}
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = appendString(b, e.channel)
		b = append(b, ':')
		b = appendString(b, e.blob.Base)
	}
	return string(append(b, '}'))
}
