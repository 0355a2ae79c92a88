package mooncake

import (
	"bufio"

	"github.com/valyala/fasthttp"

	"github.com/seed-c7a81618/conductor/httpd/server"
	"github.com/seed-c7a81618/conductor/wire/dump"
)

// handleDump serves GET /dump: the main form of package dump, streamed.
func (s *Server) handleDump(ctx *fasthttp.RequestCtx) {
	ctx.SetStatusCode(200)
	ctx.SetContentType(server.ContentTypeJSON)
	ix, log := s.ix, s.opts.Logger
	progress := server.DeadlinePusher(ctx, s.opts.WriteTimeout)
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		if err := dump.WriteProgress(ix, w, progress); err != nil {
			log.Warn("dump aborted", "err", err)
		}
	})
}
