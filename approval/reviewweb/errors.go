package reviewweb

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint"
)

// Problem is one thing wrong with edited arguments, at its JSON path.
type Problem struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// apiError is a refusal as the API and the pages report it: the status,
// a code for programs, a message for people, and for a lost race the
// decision that won.
type apiError struct {
	Status   int                `json:"-"`
	Code     string             `json:"code"`
	Message  string             `json:"message"`
	Winner   *approval.Decision `json:"winner,omitempty"`
	Problems []Problem          `json:"problems,omitempty"`
}

func (e *apiError) Error() string { return e.Message }

// classify turns an error of the approval package (or of the saver) into
// the refusal the API reports: 404 not found, 409 already decided (with
// the winner), 410 expired (also when the expiry sweeper won), 422 a
// verdict or edit the rules refuse, 400 a bad filter, 503 a closed store
// or a request cancelled, 500 with code corrupt a stored row that does not
// verify (naming the approval or thread; logged), 500 anything else
// (logged, not shown).
func (h *Handler) classify(ctx context.Context, err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	var won *approval.AlreadyDecidedError
	if errors.As(err, &won) {
		d := won.Winner
		if d.Outcome == approval.Expired {
			return &apiError{Status: http.StatusGone, Code: "expired", Winner: &d,
				Message: fmt.Sprintf("this request expired and was rejected at %s; it can no longer be approved", d.DecidedAt.UTC().Format(time.RFC3339))}
		}
		return &apiError{Status: http.StatusConflict, Code: "already_decided", Winner: &d,
			Message: fmt.Sprintf("already %s by %s at %s; the first decision wins, and yours was not recorded",
				d.Outcome, quote(d.Reviewer), d.DecidedAt.UTC().Format(time.RFC3339))}
	}
	switch {
	case errors.Is(err, approval.ErrNotFound):
		return &apiError{Status: http.StatusNotFound, Code: "not_found", Message: "no pending approval or decision has this ID"}
	case errors.Is(err, approval.ErrExpired):
		return &apiError{Status: http.StatusGone, Code: "expired", Message: "this request expired; it can no longer be approved"}
	case errors.Is(err, approval.ErrInvalidArgs):
		return &apiError{Status: http.StatusUnprocessableEntity, Code: "invalid_args", Message: reason(err)}
	case errors.Is(err, approval.ErrInvalidDecision):
		return &apiError{Status: http.StatusUnprocessableEntity, Code: "invalid_decision", Message: reason(err)}
	case errors.Is(err, approval.ErrInvalidRequest), errors.Is(err, approval.ErrInvalidExpiry):
		return &apiError{Status: http.StatusUnprocessableEntity, Code: "invalid_request",
			Message: "this request cannot be decided (" + reason(err) + "); the expiry sweeper rejects it"}
	case errors.Is(err, approval.ErrInvalidFilter):
		return &apiError{Status: http.StatusBadRequest, Code: "invalid_filter", Message: reason(err)}
	case errors.Is(err, approval.ErrClosed), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return &apiError{Status: http.StatusServiceUnavailable, Code: "unavailable", Message: "the inbox is shutting down or the request was cancelled; try again"}
	case errors.Is(err, approval.ErrCorrupt), errors.Is(err, checkpoint.ErrCorrupt):
		h.o.Logger.LogAttrs(ctx, slog.LevelError, "reviewweb: a stored row is corrupt", slog.String("error", err.Error()))
		return &apiError{Status: http.StatusInternalServerError, Code: "corrupt", Message: corruptMessage(err)}
	}
	h.o.Logger.LogAttrs(ctx, slog.LevelError, "reviewweb: request failed", slog.String("error", err.Error()))
	return &apiError{Status: http.StatusInternalServerError, Code: "internal", Message: "the inbox could not read or write its database (the error is logged)"}
}

// corruptMessage says which stored row does not verify, by approval or
// thread, without what it holds (the error is logged in full).
func corruptMessage(err error) string {
	const tail = " does not verify: it was damaged, edited or copied from elsewhere; nothing was recorded, and an operator must inspect or restore it (the error is logged)"
	var ae *approval.CorruptError
	if errors.As(err, &ae) {
		return "the stored " + ae.What + " of approval " + quote(ae.ID) + tail
	}
	var ce *checkpoint.CorruptError
	if errors.As(err, &ce) {
		return "the stored data of thread " + quote(ce.Thread) + tail
	}
	return "a stored row" + tail
}

// reason is the reason of an *approval.Error, or the error's message.
func reason(err error) string {
	var e *approval.Error
	if errors.As(err, &e) && e.Reason != "" {
		return e.Reason
	}
	return err.Error()
}

// fail answers r with the refusal: JSON for the API, a page otherwise.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, e *apiError) {
	if isAPI(r) {
		writeJSON(w, e.Status, struct {
			Error *apiError `json:"error"`
		}{e})
		return
	}
	h.errorPage(w, r, e)
}
