package graph

import "log/slog"

func strAttr(k, v string) slog.Attr { return slog.String(k, v) }

func intAttr(k string, v int) slog.Attr { return slog.Int(k, v) }
