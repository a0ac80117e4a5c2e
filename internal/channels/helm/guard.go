package helm

import (
	"fmt"
	"maps"
	"path"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/template/parse"

	"github.com/Masterminds/sprig/v3"
	chart "helm.sh/helm/v4/pkg/chart/v2"
)

// Bounds on what the template functions of one render may make. Variables, so that tests
// can lower them.
var (
	// maxFunctionBytes caps what the template functions of one render return in all
	// (strings by their length, lists and maps by an estimate of their memory): a
	// template that builds ever larger values in a loop stops there.
	maxFunctionBytes int64 = 4 * MaxRenderedBytes
	// maxCallBytes caps what one call of a function that allocates in proportion to a
	// number argument may make (repeat, indent, randAlphaNum, printf's width, ...),
	// checked before it runs.
	maxCallBytes int64 = MaxRenderedBytes
	// maxListLength caps the lists until, untilStep and seq make, and a range over a
	// literal number, checked before they run.
	maxListLength int64 = 1 << 20
)

// helmFuncs are the template functions the SDK's engine defines itself, over sprig's of
// the same name or besides them: the guards leave them as they are. fail and
// getHostByName are Helm's too; env and expandenv are sprig's, which the engine removes
// and the guards must not bring back.
var helmFuncs = map[string]bool{
	"toToml": true, "mustToToml": true, "fromToml": true,
	"toYaml": true, "mustToYaml": true, "toYamlPretty": true, "fromYaml": true, "fromYamlArray": true,
	"toJson": true, "mustToJson": true, "fromJson": true, "fromJsonArray": true,
	"mustToDuration": true, "durationSeconds": true, "durationMilliseconds": true, "durationMicroseconds": true,
	"durationNanoseconds": true, "durationMinutes": true, "durationHours": true, "durationDays": true,
	"durationWeeks": true, "durationRoundTo": true, "durationTruncateTo": true,
	"include": true, "tpl": true, "required": true, "fail": true, "lookup": true, "getHostByName": true,
	"env": true, "expandenv": true,
}

// nondeterministicFuncs are the template functions whose result is not a function of
// their arguments: the time, the local time zone, randomness.
var nondeterministicFuncs = map[string]bool{
	"now": true, "ago": true, "date": true, "date_in_zone": true, "dateInZone": true, "date_modify": true,
	"dateModify": true, "htmlDate": true, "htmlDateInZone": true,
	"randAlphaNum": true, "randAlpha": true, "randAscii": true, "randNumeric": true, "randBytes": true,
	"randInt": true, "uuidv4": true, "shuffle": true,
	"genPrivateKey": true, "genCA": true, "genCAWithKey": true, "genSelfSignedCert": true,
	"genSelfSignedCertWithKey": true, "genSignedCert": true, "genSignedCertWithKey": true,
	"bcrypt": true, "htpasswd": true, "encryptAES": true,
}

// guard is the state one render's template functions share: whether the render was
// stopped, what the functions made, and which nondeterministic ones ran.
type guard struct {
	key   string
	err   atomic.Pointer[Error]
	spent atomic.Int64

	mu     sync.Mutex
	called map[string]bool
}

func newGuard(key string) *guard {
	return &guard{key: key, called: map[string]bool{}}
}

// stop stops the render with err, unless it was stopped already.
func (g *guard) stop(err *Error) { g.err.CompareAndSwap(nil, err) }

// stopped returns why the render was stopped, or nil.
func (g *guard) stopped() error {
	if err := g.err.Load(); err != nil {
		return err
	}
	return nil
}

// check fails the current template function, and with it the template, once the render
// was stopped. text/template turns the panic of a function into the template's error.
func (g *guard) check() {
	if err := g.err.Load(); err != nil {
		panic(err)
	}
}

// refuse stops the render with a PackageTooLarge error and fails the current function.
func (g *guard) refuse(format string, args ...any) {
	g.stop(tooLarge(g.key, format, args...))
	g.check()
}

// account takes what a function returned from the render's budget.
func (g *guard) account(name string, v reflect.Value) {
	var n int64
	switch v.Kind() {
	case reflect.String:
		n = int64(v.Len())
	case reflect.Slice, reflect.Array:
		n = 16 * int64(v.Len())
	case reflect.Map:
		n = 64 * int64(v.Len())
	default:
		return
	}
	if g.spent.Add(n) > maxFunctionBytes {
		g.refuse("the template functions made more than %d bytes (the cap on what a chart's template functions make; "+
			"the last was %s)", maxFunctionBytes, name)
	}
}

// funcs returns the template functions that replace the engine's: every function of
// sprig the engine keeps, guarded, and lookup, getHostByName and printf.
func (g *guard) funcs() map[string]any {
	out := map[string]any{}
	for name, fn := range sprig.TxtFuncMap() {
		if helmFuncs[name] {
			continue
		}
		out[name] = g.wrap(name, fn, argChecks[name])
	}
	// lookup returns nothing, as for `helm template`. A template-only render must be a
	// function of its inputs, so that the render cache and the golden outputs of the tests
	// hold; and serving lookup from the operator's cache would let a chart read any object
	// the operator can read, Secrets of other namespaces included, past AddonPolicy and
	// the add-on's own identity.
	out["lookup"] = func(string, string, string, string) (map[string]any, error) {
		g.check()
		return map[string]any{}, nil
	}
	// getHostByName resolves nothing (the SDK's engine without EnableDNS does the same):
	// a render makes no network request.
	out["getHostByName"] = func(string) string {
		g.check()
		return ""
	}
	// printf is text/template's built-in fmt.Sprintf, guarded: a width of a billion
	// would allocate a gigabyte.
	out["printf"] = g.wrap("printf", fmt.Sprintf, checkPrintf)
	return out
}

// wrap returns fn guarded: it fails once the render is stopped, checks its arguments
// with pre (when not nil) before it runs, takes what it returns from the budget, and
// records the call of a nondeterministic function.
func (g *guard) wrap(name string, fn any, pre func(g *guard, args []reflect.Value)) any {
	v := reflect.ValueOf(fn)
	t := v.Type()
	if t.Kind() != reflect.Func {
		return fn
	}
	nondeterministic := nondeterministicFuncs[name]
	return reflect.MakeFunc(t, func(args []reflect.Value) []reflect.Value {
		g.check()
		if pre != nil {
			pre(g, args)
		}
		if nondeterministic {
			g.mu.Lock()
			g.called[name] = true
			g.mu.Unlock()
		}
		var out []reflect.Value
		if t.IsVariadic() {
			out = v.CallSlice(args)
		} else {
			out = v.Call(args)
		}
		if len(out) > 0 {
			g.account(name, out[0])
		}
		return out
	}).Interface()
}

// nondeterministic returns the names of the nondeterministic functions called, sorted.
func (g *guard) nondeterministic() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.called) == 0 {
		return nil
	}
	return slices.Sorted(maps.Keys(g.called))
}

// argChecks check, before a function runs, the arguments that decide how much it
// allocates.
var argChecks = map[string]func(g *guard, args []reflect.Value){
	"until": func(g *guard, args []reflect.Value) {
		g.checkList("until", abs(args[0].Int()))
	},
	"untilStep": func(g *guard, args []reflect.Value) {
		start, stop, step := args[0].Int(), args[1].Int(), args[2].Int()
		if step != 0 {
			g.checkList("untilStep", span(start, stop)/abs(step))
		}
	},
	"seq": func(g *guard, args []reflect.Value) {
		p := args[len(args)-1] // the variadic ...int
		switch p.Len() {
		case 1:
			g.checkList("seq", span(1, p.Index(0).Int()))
		case 2:
			g.checkList("seq", span(p.Index(0).Int(), p.Index(1).Int()))
		case 3:
			if step := p.Index(1).Int(); step != 0 {
				g.checkList("seq", span(p.Index(0).Int(), p.Index(2).Int())/abs(step))
			}
		}
	},
	"repeat": func(g *guard, args []reflect.Value) {
		g.checkBytes("repeat", mul(args[0].Int(), int64(args[1].Len())))
	},
	"indent": func(g *guard, args []reflect.Value) {
		g.checkBytes("indent", indentSize(args[0].Int(), args[1].String()))
	},
	"nindent": func(g *guard, args []reflect.Value) {
		g.checkBytes("nindent", indentSize(args[0].Int(), args[1].String()))
	},
	"replace": func(g *guard, args []reflect.Value) {
		old, repl, src := args[0].String(), args[1].String(), args[2].String()
		n := int64(strings.Count(src, old))
		g.checkBytes("replace", int64(len(src))+mul(n, int64(len(repl)-len(old))))
	},
	"randAlphaNum": countCheck("randAlphaNum"),
	"randAlpha":    countCheck("randAlpha"),
	"randAscii":    countCheck("randAscii"),
	"randNumeric":  countCheck("randNumeric"),
	"randBytes":    countCheck("randBytes"),
}

// countCheck checks the count, the first argument, of a function that makes that many
// bytes.
func countCheck(name string) func(g *guard, args []reflect.Value) {
	return func(g *guard, args []reflect.Value) { g.checkBytes(name, args[0].Int()) }
}

// checkList refuses a list of n items over maxListLength.
func (g *guard) checkList(name string, n int64) {
	if n > maxListLength {
		g.refuse("%s would make a list of %d items, more than %d (the cap on a list a chart's template makes)",
			name, n, maxListLength)
	}
}

// checkBytes refuses a call that would make n bytes, over maxCallBytes.
func (g *guard) checkBytes(name string, n int64) {
	if n > maxCallBytes {
		g.refuse("%s would make %d bytes, more than %d (the cap on one template function call)", name, n, maxCallBytes)
	}
}

// checkPrintf refuses a printf whose width or precision is over maxCallBytes.
func checkPrintf(g *guard, args []reflect.Value) {
	format := args[0].String()
	var ints []int64
	if len(args) > 1 {
		rest := args[1]
		for i := range rest.Len() {
			if v := reflect.ValueOf(rest.Index(i).Interface()); v.IsValid() && v.CanInt() {
				ints = append(ints, abs(v.Int()))
			}
		}
	}
	if w := formatWidth(format, ints); w > maxCallBytes {
		g.refuse("printf would pad to %d bytes, more than %d (the cap on one template function call)", w, maxCallBytes)
	}
}

// formatWidth returns the largest width or precision a fmt format asks for; a '*' takes
// the largest integer argument.
func formatWidth(format string, ints []int64) int64 {
	var largest int64
	star := int64(0)
	for _, n := range ints {
		star = max(star, n)
	}
	for i := 0; i < len(format); i++ {
		if format[i] != '%' {
			continue
		}
		i++
		for i < len(format) && strings.IndexByte("+-# 0", format[i]) >= 0 {
			i++
		}
		for i < len(format) {
			c := format[i]
			switch {
			case c == '*':
				largest = max(largest, star)
				i++
				continue
			case c >= '0' && c <= '9':
				n := int64(0)
				for i < len(format) && format[i] >= '0' && format[i] <= '9' {
					n = min(n*10+int64(format[i]-'0'), 1<<40)
					i++
				}
				largest = max(largest, n)
				continue
			case c == '.' || c == '[' || c == ']':
				i++
				continue
			}
			break
		}
	}
	return largest
}

// abs is |n|, for the counts of the checks above.
func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}

// span is the number of integers from a to b, both included.
func span(a, b int64) int64 {
	if a > b {
		a, b = b, a
	}
	if b-a < 0 { // overflow
		return 1 << 62
	}
	return b - a + 1
}

// mul is a*b, saturating at 1<<62.
func mul(a, b int64) int64 {
	a, b = abs(a), abs(b)
	if a != 0 && b > (1<<62)/a {
		return 1 << 62
	}
	return a * b
}

// indentSize is the length of indent(spaces, s).
func indentSize(spaces int64, s string) int64 {
	return int64(len(s)) + mul(spaces, int64(strings.Count(s, "\n")+1))
}

// filesReads are the methods of .Files that read a file by name or pattern.
var filesReads = map[string]bool{"Get": true, "GetBytes": true, "Lines": true, "Glob": true}

// checkTemplates reads the templates of the chart and its subcharts before they run and
// refuses a template that names a file outside the chart as a literal (.Files.Get
// "../../etc/passwd", PackageRefused) or ranges over a literal number larger than the cap
// on a list (PackageTooLarge). .Files only holds the chart's own files, so such a read
// would get nothing: the refusal says so instead of rendering an empty value. A template
// that does not parse is left to the engine, which reports it with its own message.
func checkTemplates(c *chart.Chart, key string) error {
	for _, t := range c.Templates {
		if t == nil {
			continue
		}
		name := path.Join(c.ChartFullPath(), t.Name)
		tree := parse.New(name)
		tree.Mode = parse.SkipFuncCheck
		trees := map[string]*parse.Tree{}
		if _, err := tree.Parse(string(t.Data), "", "", trees); err != nil {
			continue
		}
		for _, tr := range trees {
			if err := checkNode(tr, tr.Root, key); err != nil {
				return err
			}
		}
	}
	for _, d := range c.Dependencies() {
		if err := checkTemplates(d, key); err != nil {
			return err
		}
	}
	return nil
}

// checkNode walks one template node for checkTemplates.
func checkNode(tr *parse.Tree, n parse.Node, key string) error {
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return nil
		}
		for _, c := range n.Nodes {
			if err := checkNode(tr, c, key); err != nil {
				return err
			}
		}
	case *parse.ActionNode:
		return checkNode(tr, n.Pipe, key)
	case *parse.TemplateNode:
		return checkNode(tr, n.Pipe, key)
	case *parse.RangeNode:
		if err := checkRange(tr, n, key); err != nil {
			return err
		}
		return checkBranch(tr, &n.BranchNode, key)
	case *parse.IfNode:
		return checkBranch(tr, &n.BranchNode, key)
	case *parse.WithNode:
		return checkBranch(tr, &n.BranchNode, key)
	case *parse.PipeNode:
		return checkPipe(tr, n, key)
	case *parse.ChainNode:
		return checkNode(tr, n.Node, key)
	}
	return nil
}

// checkRange refuses a range over a literal number over maxListLength.
func checkRange(tr *parse.Tree, n *parse.RangeNode, key string) error {
	if cmds := n.Pipe.Cmds; len(cmds) == 1 && len(cmds[0].Args) == 1 {
		if num, ok := cmds[0].Args[0].(*parse.NumberNode); ok && num.IsInt && num.Int64 > maxListLength {
			location, _ := tr.ErrorContext(n)
			return tooLarge(key, "%s: range over %d, more than %d (the cap on a list a chart's template makes)",
				location, num.Int64, maxListLength)
		}
	}
	return nil
}

// checkPipe walks the commands of a pipeline.
func checkPipe(tr *parse.Tree, n *parse.PipeNode, key string) error {
	if n == nil {
		return nil
	}
	for i, cmd := range n.Cmds {
		// "../x" | .Files.Get passes the literal as the last argument.
		var piped parse.Node
		if i > 0 && len(n.Cmds[i-1].Args) == 1 {
			piped = n.Cmds[i-1].Args[0]
		}
		if err := checkCommand(tr, cmd, piped, key); err != nil {
			return err
		}
	}
	return nil
}

// checkBranch walks the pipeline and both lists of an if, range or with.
func checkBranch(tr *parse.Tree, b *parse.BranchNode, key string) error {
	for _, n := range []parse.Node{b.Pipe, b.List, b.ElseList} {
		if n == nil || reflect.ValueOf(n).IsNil() {
			continue
		}
		if err := checkNode(tr, n, key); err != nil {
			return err
		}
	}
	return nil
}

// checkCommand refuses a read of .Files whose name is a literal outside the chart, and
// walks the command's arguments.
func checkCommand(tr *parse.Tree, cmd *parse.CommandNode, piped parse.Node, key string) error {
	if len(cmd.Args) > 0 && readsFiles(cmd.Args[0]) {
		lits := cmd.Args[1:]
		if piped != nil {
			lits = append(slices.Clone(lits), piped)
		}
		for _, a := range lits {
			s, ok := a.(*parse.StringNode)
			if !ok {
				continue
			}
			if p := s.Text; strings.HasPrefix(p, "/") || slices.Contains(strings.Split(p, "/"), "..") ||
				strings.HasPrefix(p, "\\") || strings.Contains(p, "..\\") {
				location, _ := tr.ErrorContext(cmd)
				return refused(key, "%s: %s %q names a file outside the chart; a chart may only read its own files",
					location, cmd.Args[0], p)
			}
		}
	}
	for _, a := range cmd.Args {
		if err := checkNode(tr, a, key); err != nil {
			return err
		}
	}
	return nil
}

// readsFiles reports whether n is .Files.Get (or GetBytes, Lines, Glob), from . or $.
func readsFiles(n parse.Node) bool {
	var ident []string
	switch n := n.(type) {
	case *parse.FieldNode:
		ident = n.Ident
	case *parse.VariableNode:
		ident = n.Ident
	default:
		return false
	}
	return len(ident) >= 2 && ident[len(ident)-2] == "Files" && filesReads[ident[len(ident)-1]]
}
