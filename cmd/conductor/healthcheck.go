package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// `conductor healthcheck`: GET a running conductor's /health on loopback and
// exit 0 when it answers 200, else 1 with one line saying why. It is the
// container image's HEALTHCHECK (the image carries no HTTP client).

const healthcheckHelp = `conductor healthcheck asks the conductor on this host whether it is ready
(GET http://127.0.0.1:PORT/health) and exits 0 when it answers 200, else 1.

Usage: conductor healthcheck [--port 13333] [--path /health] [--timeout 3s]
`

func runHealthcheck(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("conductor healthcheck", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	port := fs.Int("port", DefaultHTTPPort, "the HTTP port of the Mooncake API")
	path := fs.String("path", "/health", "the path to GET: /health (ready) or /livez (alive)")
	timeout := fs.Duration("timeout", 3*time.Second, "how long to wait for the answer")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, healthcheckHelp)
			return 0
		}
		fmt.Fprintln(stderr, "conductor healthcheck:", err)
		return 2
	}
	if fs.NArg() > 0 || *port <= 0 || *port > 65535 || *timeout <= 0 || len(*path) == 0 || (*path)[0] != '/' {
		fmt.Fprintln(stderr, "conductor healthcheck: want [--port 1..65535] [--path /...] [--timeout >0]")
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	url := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(*port)) + *path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		fmt.Fprintln(stderr, "conductor healthcheck:", err)
		return 2
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintln(stderr, "conductor healthcheck:", err)
		return 1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "conductor healthcheck: %s answered %d: %s\n", url, resp.StatusCode, body)
		return 1
	}
	return 0
}
