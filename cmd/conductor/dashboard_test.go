package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/seed-c7a81618/conductor/replica/natstest"
)

// The Grafana dashboard in deploy/grafana/conductor.json is checked against
// the series a running conductor exports: every metric name in every PromQL
// expression of the dashboard (panels and template variables) must be a
// series name on /metrics. conductor's /metrics has no # TYPE lines, and a
// PromQL selector names a series, not a family (a histogram is queried as
// NAME_bucket), so names are compared with series names exactly.

const dashboardPath = "../../deploy/grafana/conductor.json"

// promSelector is one vector selector of a PromQL expression: the metric
// name and the text between its braces ("" when it has none).
type promSelector struct {
	name, matchers string
}

// PromQL's functions and aggregation operators (an identifier before "(" must
// be one of them), its keywords, and the keywords whose parenthesised list
// holds label names, not expressions.
var (
	promFunctions = wordSet(`abs absent absent_over_time acos acosh asin asinh atan atanh avg_over_time ceil
		changes clamp clamp_max clamp_min cos cosh count_over_time day_of_month day_of_week day_of_year days_in_month
		deg delta deriv double_exponential_smoothing exp floor histogram_avg histogram_count histogram_fraction
		histogram_quantile histogram_stddev histogram_stdvar histogram_sum holt_winters hour idelta increase info irate
		label_join label_replace last_over_time ln log10 log2 mad_over_time max_over_time min_over_time minute month
		pi predict_linear present_over_time quantile_over_time rad rate resets round scalar sgn sin sinh sort
		sort_by_label sort_by_label_desc sort_desc sqrt stddev_over_time stdvar_over_time sum_over_time tan tanh time
		timestamp vector year start end
		sum min max avg group stddev stdvar count count_values bottomk topk quantile limitk limit_ratio`)
	promKeywords   = wordSet(`by without on ignoring group_left group_right bool offset and or unless atan2 inf nan`)
	promLabelLists = wordSet(`by without on ignoring group_left group_right`)
)

func wordSet(words string) map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(words) {
		m[w] = true
	}
	return m
}

func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

func isIdentByte(c byte) bool { return isIdentStart(c) || '0' <= c && c <= '9' }

// skipQuoted returns the index after the string literal starting at s[i].
func skipQuoted(s string, i int) (int, error) {
	q := s[i]
	for j := i + 1; j < len(s); j++ {
		switch {
		case s[j] == '\\' && q != '`':
			j++
		case s[j] == q:
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("unterminated string at offset %d", i)
}

// skipGroup returns the index after the group opened by s[i] ('(', '{' or
// '['), skipping string literals inside it.
func skipGroup(s string, i int) (int, error) {
	open := s[i]
	closer := map[byte]byte{'(': ')', '{': '}', '[': ']'}[open]
	depth := 0
	for j := i; j < len(s); j++ {
		switch c := s[j]; {
		case c == '"' || c == '\'' || c == '`':
			end, err := skipQuoted(s, j)
			if err != nil {
				return 0, err
			}
			j = end - 1
		case c == open:
			depth++
		case c == closer:
			if depth--; depth == 0 {
				return j + 1, nil
			}
		}
	}
	return 0, fmt.Errorf("unclosed %q at offset %d", open, i)
}

func skipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// promSelectors returns the vector selectors of a PromQL expression, which
// may hold Grafana variables ($name, ${name}). It skips functions,
// aggregations, keywords, label lists after by/without/on/ignoring/
// group_left/group_right, label matchers, ranges and durations, numbers and
// strings. A call of an unknown function, a selector without a metric name
// and unbalanced brackets are errors.
func promSelectors(expr string) ([]promSelector, error) {
	var out []promSelector
	depth := 0
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			end, err := skipQuoted(expr, i)
			if err != nil {
				return nil, err
			}
			i = end
		case c == '$':
			i++
			if i < len(expr) && expr[i] == '{' {
				end, err := skipGroup(expr, i)
				if err != nil {
					return nil, err
				}
				i = end
			}
			for i < len(expr) && isIdentByte(expr[i]) {
				i++
			}
		case c == '[':
			end, err := skipGroup(expr, i)
			if err != nil {
				return nil, err
			}
			i = end
		case c == '{':
			return nil, fmt.Errorf("selector without a metric name at offset %d", i)
		case c == '(':
			depth++
			i++
		case c == ')':
			if depth--; depth < 0 {
				return nil, fmt.Errorf("unbalanced ')' at offset %d", i)
			}
			i++
		case '0' <= c && c <= '9' || c == '.':
			for i < len(expr) && (isIdentByte(expr[i]) || expr[i] == '.') {
				i++
			}
		case isIdentStart(c):
			start := i
			for i < len(expr) && isIdentByte(expr[i]) {
				i++
			}
			word := expr[start:i]
			next := skipSpace(expr, i)
			lower := strings.ToLower(word)
			switch {
			case promLabelLists[lower]:
				if next < len(expr) && expr[next] == '(' {
					end, err := skipGroup(expr, next)
					if err != nil {
						return nil, err
					}
					i = end
				}
			case promKeywords[lower]:
			case promFunctions[word]:
			case next < len(expr) && expr[next] == '(':
				return nil, fmt.Errorf("unknown function %q", word)
			default:
				sel := promSelector{name: word}
				if next < len(expr) && expr[next] == '{' {
					end, err := skipGroup(expr, next)
					if err != nil {
						return nil, err
					}
					sel.matchers = expr[next+1 : end-1]
					i = end
				}
				if strings.Contains(sel.matchers, "__name__") {
					return nil, fmt.Errorf("selector %s{%s} matches on __name__", word, sel.matchers)
				}
				out = append(out, sel)
			}
		default:
			i++
		}
	}
	if depth != 0 {
		return nil, fmt.Errorf("%d unclosed '('", depth)
	}
	return out, nil
}

var (
	labelValuesRE     = regexp.MustCompile(`^label_values\((.*),\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)$`)
	labelValuesOnlyRE = regexp.MustCompile(`^label_values\(\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)$`)
	queryResultRE     = regexp.MustCompile(`^query_result\((.*)\)$`)
)

// variableExpr returns the PromQL expression inside a Grafana Prometheus
// query variable ("" when it names no metric).
func variableExpr(query string) (string, error) {
	query = strings.TrimSpace(query)
	if m := labelValuesRE.FindStringSubmatch(query); m != nil {
		return m[1], nil
	}
	if labelValuesOnlyRE.MatchString(query) || query == "label_names()" {
		return "", nil
	}
	if m := queryResultRE.FindStringSubmatch(query); m != nil {
		return m[1], nil
	}
	return "", fmt.Errorf("query variable %q: not label_values(...), label_names() or query_result(...)", query)
}

// dashExpr is one PromQL expression of a dashboard and where it is.
type dashExpr struct {
	where, expr string
	variable    bool // a template variable's query
}

// dashboardExprs returns every PromQL expression of a dashboard: every
// "expr" field at any depth (panel targets, rows' panels) and the query of
// every query variable.
func dashboardExprs(dash map[string]any) ([]dashExpr, error) {
	var out []dashExpr
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			if title, ok := v["title"].(string); ok && path != "" {
				path += " " + strconv.Quote(title)
			}
			if e, ok := v["expr"].(string); ok {
				where := path
				if title, ok := v["refId"].(string); ok {
					where += " refId " + title
				}
				out = append(out, dashExpr{where: where, expr: e})
			}
			keys := make([]string, 0, len(v))
			for k := range v {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				if path == "" && k == "templating" {
					continue
				}
				walk(path+"."+k, v[k])
			}
		case []any:
			for i, e := range v {
				walk(path+"["+strconv.Itoa(i)+"]", e)
			}
		}
	}
	walk("", dash)
	templating, _ := dash["templating"].(map[string]any)
	vars, _ := templating["list"].([]any)
	for _, v := range vars {
		v, _ := v.(map[string]any)
		if v["type"] != "query" {
			continue
		}
		query, ok := v["query"].(string)
		if q, isObj := v["query"].(map[string]any); isObj {
			query, ok = q["query"].(string)
		}
		if !ok {
			return nil, fmt.Errorf("variable %v: no query", v["name"])
		}
		e, err := variableExpr(query)
		if err != nil {
			return nil, err
		}
		if e != "" {
			out = append(out, dashExpr{where: fmt.Sprintf("variable %v", v["name"]), expr: e, variable: true})
		}
	}
	return out, nil
}

// missingMetrics returns, sorted, each metric name the expressions select
// that is not in exposed, with where it is used.
func missingMetrics(exprs []dashExpr, exposed map[string]bool) ([]string, error) {
	var missing []string
	for _, e := range exprs {
		sels, err := promSelectors(e.expr)
		if err != nil {
			return nil, fmt.Errorf("%s: %q: %w", e.where, e.expr, err)
		}
		for _, s := range sels {
			if !exposed[s.name] {
				missing = append(missing, s.name+" ("+e.where+")")
			}
		}
	}
	slices.Sort(missing)
	return slices.Compact(missing), nil
}

// seriesNames returns the series names of a Prometheus text exposition.
func seriesNames(page []byte) map[string]bool {
	names := map[string]bool{}
	for _, line := range strings.Split(string(page), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names[line[:i]] = true
		}
	}
	return names
}

func loadDashboard(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var dash map[string]any
	d := json.NewDecoder(bytes.NewReader(b))
	if err := d.Decode(&dash); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	if d.More() {
		t.Fatalf("%s: data after the dashboard object", dashboardPath)
	}
	return dash
}

func TestPromSelectors(t *testing.T) {
	f := func(expr string, want ...string) {
		t.Helper()
		sels, err := promSelectors(expr)
		if err != nil {
			t.Fatalf("%q: %v", expr, err)
		}
		var got []string
		for _, s := range sels {
			got = append(got, s.name)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%q: got %q, want %q", expr, got, want)
		}
	}
	f(`up`, "up")
	f(`up{job="a"}`, "up")
	f(`rate(http_requests_total{job=~"$job",path="/q"}[$__rate_interval])`, "http_requests_total")
	f(`histogram_quantile(0.99, sum by (le) (rate(req_seconds_bucket{path="/query"}[5m])))`, "req_seconds_bucket")
	f(`sum(rate(a_total[1m])) by (instance, le) / ignoring(code) group_left(path) sum without (code) (b_total)`, "a_total", "b_total")
	f(`a_total offset 5m and on(job) b_total unless c_total or d_total`, "a_total", "b_total", "c_total", "d_total")
	f(`a > bool 1e-3`, "a")
	f(`go_memlimit_bytes < 1e18`, "go_memlimit_bytes")
	f(`a{l="by (x) sum(y) {z}"} * on() group_right b`, "a", "b")
	f(`label_replace(up, "dst", "$1", "src", "(.*)")`, "up")
	f(`count_values("version", build_info)`, "build_info")
	f(`max_over_time(x[1h:5m]) @ end()`, "x")
	f(`sum(${metric_var}) + 1`)
	f(`vector(1) + scalar(time()) + Inf - NaN`)
	f(`topk(3, ns:requests:rate5m)`, "ns:requests:rate5m")
	f(`quantile(0.5, x{a='single \' quote'}) + atan2 y`, "x", "y")

	for _, bad := range []string{
		`rat(x[5m])`,          // unknown function: a misspelt one is not skipped as a metric
		`{__name__="up"}`,     // no metric name
		`up{__name__=~"u.*"}`, // selects by __name__
		`sum(rate(x[5m])`,     // unclosed
		`sum(x))`,             // unbalanced
		`x{a="b}`,             // unterminated string
	} {
		if sels, err := promSelectors(bad); err == nil {
			t.Errorf("%q: no error (%v)", bad, sels)
		}
	}

	v := func(query, want string) {
		t.Helper()
		got, err := variableExpr(query)
		if err != nil || got != want {
			t.Errorf("variableExpr(%q) = %q, %v; want %q", query, got, err, want)
		}
	}
	v(`label_values(job)`, "")
	v(`label_values(conductor_contexts, job)`, "conductor_contexts")
	v(`label_values(conductor_contexts{job=~"$job", a="x,y"}, instance)`, `conductor_contexts{job=~"$job", a="x,y"}`)
	v(`query_result(topk(5, x))`, "topk(5, x)")
	if _, err := variableExpr(`metrics(conductor_.*)`); err == nil {
		t.Error("metrics(regex) names no checkable metric; want an error")
	}
}

// TestDashboardStructure: the dashboard is one JSON object with a Prometheus
// data-source variable that every panel and target uses, job and instance
// variables that every panel selector filters on, unique panel ids, and
// grid positions within Grafana's 24 columns.
func TestDashboardStructure(t *testing.T) {
	dash := loadDashboard(t)
	if v, _ := dash["schemaVersion"].(float64); v < 36 {
		t.Errorf("schemaVersion %v, want at least 36", dash["schemaVersion"])
	}
	for _, k := range []string{"uid", "title"} {
		if s, _ := dash[k].(string); s == "" {
			t.Errorf("no %s", k)
		}
	}
	const dsRef = "${datasource}"
	templating, _ := dash["templating"].(map[string]any)
	vars := map[string]map[string]any{}
	list, _ := templating["list"].([]any)
	for _, v := range list {
		v, _ := v.(map[string]any)
		name, _ := v["name"].(string)
		vars[name] = v
	}
	if ds := vars["datasource"]; ds == nil || ds["type"] != "datasource" || ds["query"] != "prometheus" {
		t.Errorf("no variable datasource of type datasource and query prometheus: %v", ds)
	}
	for _, name := range []string{"job", "instance"} {
		v := vars[name]
		if v == nil || v["type"] != "query" {
			t.Errorf("no query variable %s", name)
			continue
		}
		if ds, _ := v["datasource"].(map[string]any); ds["uid"] != dsRef {
			t.Errorf("variable %s: datasource %v, want uid %s", name, v["datasource"], dsRef)
		}
	}

	ids := map[float64]string{}
	var visit func(panels []any)
	visit = func(panels []any) {
		for _, p := range panels {
			p, _ := p.(map[string]any)
			title, _ := p["title"].(string)
			id, ok := p["id"].(float64)
			if !ok {
				t.Errorf("panel %q has no id", title)
			} else if prev, dup := ids[id]; dup {
				t.Errorf("panels %q and %q share id %v", prev, title, id)
			}
			ids[id] = title
			g, _ := p["gridPos"].(map[string]any)
			x, _ := g["x"].(float64)
			w, _ := g["w"].(float64)
			h, _ := g["h"].(float64)
			if w <= 0 || h <= 0 || x < 0 || x+w > 24 {
				t.Errorf("panel %q: gridPos %v", title, g)
			}
			if p["type"] == "row" {
				inner, _ := p["panels"].([]any)
				visit(inner)
				continue
			}
			if ds, _ := p["datasource"].(map[string]any); ds["uid"] != dsRef || ds["type"] != "prometheus" {
				t.Errorf("panel %q: datasource %v, want the prometheus data source %s", title, p["datasource"], dsRef)
			}
			targets, _ := p["targets"].([]any)
			if len(targets) == 0 {
				t.Errorf("panel %q has no targets", title)
			}
			for _, tg := range targets {
				tg, _ := tg.(map[string]any)
				if ds, ok := tg["datasource"].(map[string]any); ok && ds["uid"] != dsRef {
					t.Errorf("panel %q target %v: datasource %v, want %s", title, tg["refId"], ds, dsRef)
				}
				if e, _ := tg["expr"].(string); e == "" {
					t.Errorf("panel %q target %v: no expr", title, tg["refId"])
				}
			}
		}
	}
	panels, _ := dash["panels"].([]any)
	visit(panels)

	exprs, err := dashboardExprs(dash)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range exprs {
		sels, err := promSelectors(e.expr)
		if err != nil {
			t.Errorf("%s: %q: %v", e.where, e.expr, err)
			continue
		}
		if len(sels) == 0 {
			t.Errorf("%s: %q selects no metric", e.where, e.expr)
		}
		for _, s := range sels {
			if !e.variable && (!strings.Contains(s.matchers, `job=~"$job"`) || !strings.Contains(s.matchers, `instance=~"$instance"`)) {
				t.Errorf("%s: %s{%s} does not filter on $job and $instance", e.where, s.name, s.matchers)
			}
		}
	}
}

// TestDashboardMetricsExist scrapes a relay (a conductor with a registration,
// a query and a refused request behind it, so that its labelled series
// exist) and a query replica on a real NATS JetStream server, and checks that
// every metric the dashboard selects is a series one of them exports; then
// that a misspelt name in the dashboard is reported.
func TestDashboardMetricsExist(t *testing.T) {
	ns := natstest.Start(t, t.TempDir(), -1)
	relay := startConductor(t, "", "--rpc-port", strconv.Itoa(freePort(t)), "--nats-url", ns.ClientURL(), "--nats-publish")
	rep := startConductor(t, "", "--nats-url", ns.ClientURL(), "--nats-consume")

	reg := fmt.Sprintf(`{"endpoint": "tcp://127.0.0.1:%d", "type": "vLLM", "modelname": "m", "instance_id": "dashboard-engine", "block_size": 16, "dp_rank": 0}`, freePort(t))
	if code, _, body := httpDo(t, "POST", relay.url("/register"), "application/json", []byte(reg)); code != 200 {
		t.Fatalf("/register: %d %s", code, body)
	}
	if code, _, body := httpDo(t, "POST", relay.url("/query"), "application/json", []byte(`{"model": "m", "block_size": 16, "token_ids": [1, 2, 3]}`)); code != 200 {
		t.Fatalf("/query: %d %s", code, body)
	}
	if code, _, _ := httpDo(t, "GET", relay.url("/no-such-route"), "", nil); code != 404 {
		t.Fatalf("/no-such-route: %d, want 404", code)
	}
	scrape := func(p *proc) []byte {
		code, _, body := httpDo(t, "GET", p.url("/metrics"), "", nil)
		if code != 200 {
			t.Fatalf("/metrics: %d", code)
		}
		return body
	}
	// The registration's series appear once its listener exists.
	waitFor(t, "the registration's ingest series", func() bool {
		return bytes.Contains(scrape(relay), []byte(`conductor_ingest_blocks_total{instance="dashboard-engine"`))
	})
	exposed := seriesNames(scrape(relay))
	for name := range seriesNames(scrape(rep)) {
		exposed[name] = true
	}

	dash := loadDashboard(t)
	exprs, err := dashboardExprs(dash)
	if err != nil {
		t.Fatal(err)
	}
	missing, err := missingMetrics(exprs, exposed)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range missing {
		t.Errorf("the dashboard selects %s, which neither the relay nor the replica exports", m)
	}
	used := map[string]bool{}
	for _, e := range exprs {
		sels, _ := promSelectors(e.expr)
		for _, s := range sels {
			used[s.name] = true
		}
	}
	t.Logf("%d expressions select %d metrics", len(exprs), len(used))

	// The comparison catches a misspelt name: one expression of the real
	// dashboard with one name changed.
	const right, misspelt = "conductor_ingest_blocks_total", "conductor_ingest_block_total"
	changed := slices.Clone(exprs)
	n := 0
	for i := range changed {
		if strings.Contains(changed[i].expr, right+"{") {
			changed[i].expr = strings.Replace(changed[i].expr, right+"{", misspelt+"{", 1)
			n++
			break
		}
	}
	if n != 1 {
		t.Fatalf("no expression selects %s", right)
	}
	got, err := missingMetrics(changed, exposed)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !strings.HasPrefix(got[0], misspelt+" (") {
		t.Errorf("with %s misspelt as %s, missingMetrics reports %q", right, misspelt, got)
	}
}
