package dynamo

import (
	"bufio"

	"github.com/valyala/fasthttp"

	"github.com/seed-c7a81618/conductor/httpd/server"
	"github.com/seed-c7a81618/conductor/wire/dump"
)

// WriteDump writes the Dynamo form of the dump (dump.WriteDynamo) of this
// surface's indexers to w.
func (d *Server) WriteDump(w *bufio.Writer) error { return d.writeDump(w, nil) }

func (d *Server) writeDump(w *bufio.Writer, progress func()) error {
	d.mu.Lock()
	indexers := make([]dump.Indexer, 0, len(d.indexers))
	for k, bs := range d.indexers {
		indexers = append(indexers, dump.Indexer{Model: k.model, Group: k.group, BlockSize: bs})
	}
	d.mu.Unlock()
	return dump.WriteDynamo(d.ix, w, indexers, progress, d.opts.Logger)
}

// handleDump serves GET /dump: the Dynamo form, streamed.
func (d *Server) handleDump(ctx *fasthttp.RequestCtx) {
	ctx.SetStatusCode(200)
	ctx.SetContentType(server.ContentTypeJSON)
	log := d.opts.Logger
	progress := server.DeadlinePusher(ctx, d.opts.WriteTimeout)
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		if err := d.writeDump(w, progress); err != nil {
			log.Warn("dynamo dump aborted", "err", err)
		}
	})
}
