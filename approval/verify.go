package approval

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/lockstepgo/lockstep/internal/canon"
	"github.com/lockstepgo/lockstep/internal/strictjson"
)

// This file holds the rules a stored approval obeys, for every Store that
// keeps its rows outside the process: what Decide and RecordOutcome write
// always passes them, so a row that fails them was written by something
// else (a disk, a bug, a hand edit whose checksum was fixed) and is
// reported as a *CorruptError instead of being read as another decision.

// Verify reports whether r is a record a Store can have written: it
// returns nil, or a *CorruptError (matching ErrCorrupt) naming r.ID and
// what disagrees. A store that reads its records from storage (SQLStore,
// and any other implementation of Store) checks every record it reads
// with it, besides the checksum that binds the row to its approval ID,
// and writes nothing on a record that fails. The rules:
//
//   - The record and its decision name the same, non-empty approval ID,
//     and a thread.
//   - The outcome is known; an expiry is the ExpiryReviewer's, and any
//     other outcome a human reviewer's (see Verdict); the note fits
//     MaxNoteBytes and is UTF-8.
//   - The request snapshot is an approval request. A human outcome was
//     recorded on a valid request (Request.Validate) before it expired.
//   - Only an edit carries arguments, canonical JSON whose hash, with the
//     request's tool, is the decision's ArgsHash; any other decision
//     covers the request's ArgsHash.
//   - The resume progress counts no negative attempts, and a finished
//     resume has no next attempt.
func (r Record) Verify() error {
	if err := r.verify(); err != nil {
		return corrupt(r.ID, "decision", err)
	}
	if err := r.Resume.verify(); err != nil {
		return corrupt(r.ID, "resume", err)
	}
	return nil
}

func (r Record) verify() error {
	d, req := r.Decision, r.Request
	switch {
	case r.ID == "":
		return errors.New("no approval ID")
	case d.ID != r.ID:
		return fmt.Errorf("the decision answers approval %s", quoteShort(d.ID))
	case r.Thread == "":
		return errors.New("no thread")
	case !d.Outcome.Valid():
		return fmt.Errorf("unknown outcome %s", quoteShort(string(d.Outcome)))
	case len(d.Note) > MaxNoteBytes || !utf8.ValidString(d.Note):
		return errors.New("an oversized note, or one that is not UTF-8")
	case req.Type != RequestType:
		return errors.New("the request snapshot is not an approval request")
	}
	if d.Outcome == Expired {
		if d.Reviewer != ExpiryReviewer {
			return fmt.Errorf("an expiry recorded by %s, not %s", quoteShort(d.Reviewer), ExpiryReviewer)
		}
	} else {
		if why := checkReviewer(d.Reviewer); why != "" {
			return fmt.Errorf("a %s decision by %s: %s", d.Outcome, quoteShort(d.Reviewer), why)
		}
		if err := req.validate(r.ID); err != nil {
			return fmt.Errorf("a %s decision on a request that could not be decided (%s)", d.Outcome, err.Reason)
		}
		if req.Expired(d.DecidedAt) {
			return fmt.Errorf("a %s decision recorded after the request expired", d.Outcome)
		}
	}
	if d.Outcome != Edited {
		switch {
		case d.Args != nil:
			return fmt.Errorf("a %s decision with edited arguments", d.Outcome)
		case d.ArgsHash != req.ArgsHash:
			return errors.New("the decision's args_hash is not the request's")
		}
		return nil
	}
	c, err := canon.JSON(d.Args)
	if err != nil || !bytes.Equal(c, d.Args) {
		return errors.New("edited arguments that are not canonical JSON")
	}
	if h, err := ArgsHash(req.Tool, d.Args); err != nil || h != d.ArgsHash {
		return errors.New("the decision's args_hash does not cover its edited arguments")
	}
	return nil
}

func (r Resume) verify() error {
	switch {
	case r.Attempts < 0:
		return fmt.Errorf("%d attempts", r.Attempts)
	case !r.At.IsZero() && !r.NotBefore.IsZero():
		return errors.New("a finished resume with a next attempt")
	case len(r.Note) > maxErrorBytes || len(r.LastError) > maxErrorBytes:
		return errors.New("an oversized note or error")
	case (r.Claimant == "") != (r.Claim == "") || len(r.Claimant) > MaxClaimBytes || len(r.Claim) > MaxClaimBytes ||
		!utf8.ValidString(r.Claimant) || !utf8.ValidString(r.Claim):
		return errors.New("a claimant without a claim, or either oversized or not UTF-8")
	case r.Claimant != "" && (!r.At.IsZero() || r.NotBefore.IsZero()):
		return errors.New("a claimant on a resume that is finished or not claimed")
	}
	return nil
}

// Verify reports whether t is a trail a Store can have written: its
// record passes Record.Verify, and an outcome, when there is one, was
// recorded for an approved call, covers the decision's arguments, and
// holds canonical JSON (or none) and a UTF-8 error within MaxNoteBytes. It
// returns nil or a *CorruptError naming t.ID.
func (t Trail) Verify() error {
	if err := t.Record.Verify(); err != nil {
		return err
	}
	if t.Execution == nil {
		return nil
	}
	if err := t.Execution.verify(t.Record); err != nil {
		return corrupt(t.ID, "execution", err)
	}
	return nil
}

func (e Execution) verify(r Record) error {
	switch {
	case !r.Decision.Allows():
		return fmt.Errorf("an outcome of a %s call", r.Decision.Outcome)
	case e.ArgsHash != r.Decision.ArgsHash:
		return errors.New("the outcome's args_hash is not the decision's")
	case len(e.Error) > MaxNoteBytes || !utf8.ValidString(e.Error):
		return errors.New("an oversized error, or one that is not UTF-8")
	case len(e.IdempotencyKey) > MaxReviewerBytes:
		return errors.New("an oversized idempotency key")
	}
	if e.Result != nil {
		c, err := canon.JSON(e.Result)
		if err != nil || !bytes.Equal(c, e.Result) {
			return errors.New("a result that is not canonical JSON")
		}
	}
	return nil
}

// encodeRequest returns the snapshot of req a store keeps: json.Marshal's
// encoding, which ParseRequest reads back as req. A request that does not
// read back (a Context or Schema holding JSON json.Marshal passes through
// but strict decoding refuses: a duplicate key, a lone surrogate escape,
// invalid UTF-8) is an *Error matching ErrInvalidRequest, so that no
// store records a decision whose snapshot it would later report corrupt.
func encodeRequest(id string, req Request) ([]byte, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, newError(id, ErrInvalidRequest, "does not encode: %v", err)
	}
	if err := strictjson.CheckJSON(b); err != nil {
		return nil, newError(id, ErrInvalidRequest, "its JSON would not read back as it is: %v", err)
	}
	if _, ok, err := ParseRequest(b); !ok || err != nil {
		return nil, newError(id, ErrInvalidRequest, "its JSON would not read back as it is: %v", err)
	}
	return b, nil
}
