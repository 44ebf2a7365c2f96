package merritttest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// exception is a failure as the service raises one (mrt-core2's
// TException): its status, the class and method it was raised in, and
// its detail.
type exception struct {
	status        string
	code          int // the HTTP status: the status's own when 0
	detail        string
	class, method string
}

func (e *exception) Error() string { return e.status + ": " + e.detail }

// statuses are the exception statuses (TExceptionEnum) the stand-in
// raises: each one's description and HTTP status.
var statuses = map[string]struct {
	description string
	code        int
}{
	"REQUEST_INVALID":              {"User/request supplied required parm is missing or invalid", 400},
	"REQUEST_ITEM_EXISTS":          {"Request fails because element already exists", 403},
	"REQUESTED_ITEM_NOT_FOUND":     {"Request contains element that cannot be located", 404},
	"INVALID_OR_MISSING_PARM":      {"Program required parm is missing or invalid", 500},
	"GENERAL_EXCEPTION":            {"Unexpected Programmic exception", 500},
	"INVALID_DATA_FORMAT":          {"Generic data being processed is invalidly formatted", 500},
	"FIXITY_CHECK_FAILS":           {"Fixity comparison between saved file and returned file fails", 500},
	"REQUEST_ELEMENT_UNSUPPORTED":  {"User/request supplied parm type is not supported", 501},
	"EXTERNAL_SERVICE_UNAVAILABLE": {"Unavailable remote service", 503},
	"GATEWAY_TIMEOUT":              {"Gateway timeout", 504},
}

// statusOfCode is the exception status a refusal of an HTTP status
// raises.
func statusOfCode(code int) string {
	for _, name := range []string{"REQUEST_INVALID", "REQUEST_ITEM_EXISTS", "REQUESTED_ITEM_NOT_FOUND", "GENERAL_EXCEPTION",
		"REQUEST_ELEMENT_UNSUPPORTED", "EXTERNAL_SERVICE_UNAVAILABLE", "GATEWAY_TIMEOUT"} {
		if statuses[name].code == code {
			return name
		}
	}
	return "GENERAL_EXCEPTION"
}

func (e *exception) httpCode() int {
	if e.code != 0 {
		return e.code
	}
	if c := statuses[e.status].code; c != 0 {
		return c
	}
	return http.StatusInternalServerError
}

func fail(status, class, method, format string, args ...any) *exception {
	return &exception{status: status, detail: fmt.Sprintf(format, args...), class: class, method: method}
}

// line is the source line an exception names: any number will do, the
// same for the same place.
func (e *exception) line() int {
	n := 0
	for _, c := range e.class + e.method {
		n = (n*31 + int(c)) % 1900
	}
	return 100 + n
}

// javaClass is the fully qualified name of the class an exception was
// raised in.
func (e *exception) javaClass() string {
	pkg := "org.cdlib.mrt.store.app.jersey"
	switch e.class {
	case "HTTPUtil", "HttpGet", "FileUtil", "TException":
		pkg = "org.cdlib.mrt.utility"
	case "Checkm", "Manifest", "ComponentContent":
		pkg = "org.cdlib.mrt.core"
	case "VersionMap":
		pkg = "org.cdlib.mrt.cloud"
	case "AddVersionContentAbs", "AddVersionThread", "UpdateVersionThread":
		pkg = "org.cdlib.mrt.cloud.action"
	case "StorageServiceAbs":
		pkg = "org.cdlib.mrt.store.storage"
	case "JerseyStorage":
		pkg = "org.cdlib.mrt.store.app.jersey.store"
	}
	return pkg + "." + e.class
}

// String is the exception as TException.toString spells it, which its
// "error" getter gives.
func (e *exception) String() string {
	return fmt.Sprintf("%s-%s:%d %s[%s] %s", e.javaClass(), e.method, e.line(), e.status, statuses[e.status].description, e.detail)
}

// trace is the exception's stack trace as Java prints it: the frames from
// where it was raised down through the servlet container, several KiB.
func (e *exception) trace() string {
	var b strings.Builder
	fmt.Fprintf(&b, "org.cdlib.mrt.utility.TException$%s: %s\n", e.status, e.String())
	frames := []string{
		e.javaClass() + "." + e.method + "(" + e.class + ".java:" + strconv.Itoa(e.line()) + ")",
		"org.cdlib.mrt.cloud.action.AddVersionThread.addVersion(AddVersionThread.java:208)",
		"org.cdlib.mrt.cloud.action.AddVersionThread.run(AddVersionThread.java:121)",
		"org.cdlib.mrt.cloud.action.AddVersionThread.process(AddVersionThread.java:135)",
		"org.cdlib.mrt.cloud.action.AddVersionThread.callEx(AddVersionThread.java:162)",
		"org.cdlib.mrt.store.cloud.CloudObjectService.addVersion(CloudObjectService.java:131)",
		"org.cdlib.mrt.store.storage.StorageService.addVersion(StorageService.java:241)",
		"org.cdlib.mrt.store.app.jersey.JerseyBase.addVersion(JerseyBase.java:1392)",
		"org.cdlib.mrt.store.app.jersey.JerseyBase.addVersion(JerseyBase.java:1097)",
		"org.cdlib.mrt.store.app.jersey.store.JerseyStorage.callAddVersion(JerseyStorage.java:433)",
		"java.base/jdk.internal.reflect.DirectMethodHandleAccessor.invoke(DirectMethodHandleAccessor.java:103)",
		"java.base/java.lang.reflect.Method.invoke(Method.java:580)",
		"org.glassfish.jersey.server.model.internal.ResourceMethodInvocationHandlerFactory.lambda$static$0(ResourceMethodInvocationHandlerFactory.java:52)",
		"org.glassfish.jersey.server.model.internal.AbstractJavaResourceMethodDispatcher$1.run(AbstractJavaResourceMethodDispatcher.java:146)",
		"org.glassfish.jersey.server.model.internal.AbstractJavaResourceMethodDispatcher.invoke(AbstractJavaResourceMethodDispatcher.java:189)",
		"org.glassfish.jersey.server.model.internal.JavaResourceMethodDispatcherProvider$ResponseOutInvoker.doDispatch(JavaResourceMethodDispatcherProvider.java:176)",
		"org.glassfish.jersey.server.model.internal.AbstractJavaResourceMethodDispatcher.dispatch(AbstractJavaResourceMethodDispatcher.java:93)",
		"org.glassfish.jersey.server.model.ResourceMethodInvoker.invoke(ResourceMethodInvoker.java:478)",
		"org.glassfish.jersey.server.model.ResourceMethodInvoker.apply(ResourceMethodInvoker.java:400)",
		"org.glassfish.jersey.server.model.ResourceMethodInvoker.apply(ResourceMethodInvoker.java:81)",
		"org.glassfish.jersey.server.ServerRuntime$1.run(ServerRuntime.java:261)",
		"org.glassfish.jersey.internal.Errors$1.call(Errors.java:248)",
		"org.glassfish.jersey.internal.Errors$1.call(Errors.java:244)",
		"org.glassfish.jersey.internal.Errors.process(Errors.java:292)",
		"org.glassfish.jersey.internal.Errors.process(Errors.java:274)",
		"org.glassfish.jersey.internal.Errors.process(Errors.java:244)",
		"org.glassfish.jersey.process.internal.RequestScope.runInScope(RequestScope.java:265)",
		"org.glassfish.jersey.server.ServerRuntime.process(ServerRuntime.java:240)",
		"org.glassfish.jersey.server.ApplicationHandler.handle(ApplicationHandler.java:697)",
		"org.glassfish.jersey.servlet.WebComponent.serviceImpl(WebComponent.java:394)",
		"org.glassfish.jersey.servlet.WebComponent.service(WebComponent.java:346)",
		"org.glassfish.jersey.servlet.ServletContainer.service(ServletContainer.java:357)",
		"org.glassfish.jersey.servlet.ServletContainer.service(ServletContainer.java:311)",
		"org.glassfish.jersey.servlet.ServletContainer.service(ServletContainer.java:205)",
		"org.apache.catalina.core.ApplicationFilterChain.internalDoFilter(ApplicationFilterChain.java:195)",
		"org.apache.catalina.core.ApplicationFilterChain.doFilter(ApplicationFilterChain.java:140)",
		"org.apache.logging.log4j.web.Log4jServletFilter.doFilter(Log4jServletFilter.java:71)",
		"org.apache.catalina.core.ApplicationFilterChain.internalDoFilter(ApplicationFilterChain.java:164)",
		"org.apache.catalina.core.ApplicationFilterChain.doFilter(ApplicationFilterChain.java:140)",
		"org.apache.catalina.filters.SetCharacterEncodingFilter.doFilter(SetCharacterEncodingFilter.java:109)",
		"org.apache.catalina.core.ApplicationFilterChain.internalDoFilter(ApplicationFilterChain.java:164)",
		"org.apache.catalina.core.ApplicationFilterChain.doFilter(ApplicationFilterChain.java:140)",
		"org.apache.catalina.filters.HttpHeaderSecurityFilter.doFilter(HttpHeaderSecurityFilter.java:126)",
		"org.apache.catalina.core.ApplicationFilterChain.internalDoFilter(ApplicationFilterChain.java:164)",
		"org.apache.catalina.core.ApplicationFilterChain.doFilter(ApplicationFilterChain.java:140)",
		"org.apache.catalina.filters.RemoteIpFilter.doFilter(RemoteIpFilter.java:866)",
		"org.apache.catalina.core.ApplicationFilterChain.internalDoFilter(ApplicationFilterChain.java:164)",
		"org.apache.catalina.core.ApplicationFilterChain.doFilter(ApplicationFilterChain.java:140)",
		"org.apache.tomcat.websocket.server.WsFilter.doFilter(WsFilter.java:51)",
		"org.apache.catalina.core.ApplicationFilterChain.internalDoFilter(ApplicationFilterChain.java:164)",
		"org.apache.catalina.core.ApplicationFilterChain.doFilter(ApplicationFilterChain.java:140)",
		"org.apache.catalina.core.StandardWrapperValve.invoke(StandardWrapperValve.java:167)",
		"org.apache.catalina.core.StandardContextValve.invoke(StandardContextValve.java:90)",
		"org.apache.catalina.authenticator.AuthenticatorBase.invoke(AuthenticatorBase.java:483)",
		"org.apache.catalina.core.StandardHostValve.invoke(StandardHostValve.java:115)",
		"org.apache.catalina.valves.ErrorReportValve.invoke(ErrorReportValve.java:93)",
		"org.apache.catalina.valves.AbstractAccessLogValve.invoke(AbstractAccessLogValve.java:673)",
		"org.apache.catalina.core.StandardEngineValve.invoke(StandardEngineValve.java:74)",
		"org.apache.catalina.connector.CoyoteAdapter.service(CoyoteAdapter.java:344)",
		"org.apache.coyote.http11.Http11Processor.service(Http11Processor.java:391)",
		"org.apache.coyote.AbstractProcessorLight.process(AbstractProcessorLight.java:63)",
		"org.apache.coyote.AbstractProtocol$ConnectionHandler.process(AbstractProtocol.java:896)",
		"org.apache.tomcat.util.net.NioEndpoint$SocketProcessor.doRun(NioEndpoint.java:1744)",
		"org.apache.tomcat.util.net.SocketProcessorBase.run(SocketProcessorBase.java:52)",
		"org.apache.tomcat.util.threads.ThreadPoolExecutor.runWorker(ThreadPoolExecutor.java:1191)",
		"org.apache.tomcat.util.threads.ThreadPoolExecutor$Worker.run(ThreadPoolExecutor.java:659)",
		"org.apache.tomcat.util.threads.TaskThread$WrappingRunnable.run(TaskThread.java:61)",
		"java.base/java.lang.Thread.run(Thread.java:1583)",
	}
	for _, f := range frames {
		b.WriteString("\tat " + f + "\n")
	}
	return b.String()
}

// answerError writes an exception as the service formats one (every
// getter of TException, its trace included), with its HTTP status.
func (s *Service) answerError(w http.ResponseWriter, respForm string, e *exception) {
	code := e.httpCode()
	where := fmt.Sprintf("%s.%s(%s.java:%d)", e.javaClass(), e.method, e.class, e.line())
	access := fmt.Sprintf(`{"status":%d,"message":"%s","developer":" - detail=%s - statusName=%s - className=%s - methodName=%s - lineNumber=%d"}`,
		code, statuses[e.status].description, e.detail, e.status, e.javaClass(), e.method, e.line())
	d := stateDoc{root: "tException." + e.status, prefix: "exc", ns: "http://uc3.cdlib.org/ontology/mrt/core/exc", elems: []elem{
		{name: "methodName", value: e.method},
		{name: "lineNumber", value: int64(e.line())},
		{name: "className", value: e.javaClass()},
		{name: "trace", value: e.trace()},
		{name: "location", value: where},
		{name: "status", value: e.status},
		{name: "statusName", value: e.status},
		{name: "description", value: statuses[e.status].description},
		{name: "statusDescription", value: statuses[e.status].description},
		{name: "hTTPResponse", value: int64(code)},
		{name: "accessExcp", value: access},
		{name: "error", value: e.String()},
		{name: "detail", value: e.detail},
	}}
	s.write(w, respForm, code, d)
}

// versionState is a version to answer with.
type versionState struct {
	node      int
	id        string
	v         version
	overwrote int // versions the call that made it dropped
}

// stateDoc is a state answer before it is formatted: its root element,
// namespace, and elements in order (a value is a string, an int64, a bool,
// or []string for an element given once per value).
type stateDoc struct {
	root, prefix, ns string
	elems            []elem
}

type elem struct {
	name  string
	value any
	// list is the element that wraps a []string, the value element's name
	// being name.
	list string
}

// enc spells an id in a URL as the service does (Java's URLEncoder):
// letters, digits and ".-*_" stay, a space is "+", all else %XX.
func enc(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '-', c == '*', c == '_':
			b.WriteByte(c)
		case c == ' ':
			b.WriteByte('+')
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// state is the version's state: every file of it, and what its call
// stored anew (the actual files and size).
func (vs versionState) state(base string) stateDoc {
	var size, actualSize, actual int64
	var fileStates []string
	for _, f := range vs.v.files {
		size += int64(len(f.data))
		if f.stored == vs.v.number {
			actual++
			actualSize += int64(len(f.data))
		}
		fileStates = append(fileStates, fmt.Sprintf("%s/state/%d/%s/%d/%s", base, vs.node, enc(vs.id), vs.v.number, enc(f.name)))
	}
	return stateDoc{root: "versionState", prefix: "ver", ns: "http://uc3.cdlib.org/ontology/mrt/store/version", elems: []elem{
		{name: "objectState", value: fmt.Sprintf("%s/state/%d/%s", base, vs.node, enc(vs.id))},
		{name: "version", value: fmt.Sprintf("%s/content/%d/%s/%d", base, vs.node, enc(vs.id), vs.v.number)},
		{name: "fileState", list: "fileStates", value: fileStates},
		{name: "objectID", value: vs.id},
		{name: "identifier", value: int64(vs.v.number)},
		{name: "created", value: vs.v.created.Format(time.RFC3339)},
		{name: "current", value: true},
		{name: "numFiles", value: int64(len(vs.v.files))},
		{name: "totalSize", value: size},
		{name: "numActualFiles", value: actual},
		{name: "totalActualSize", value: actualSize},
	}}
}

// state answers about an object or one of its versions. A node the
// service does not have is refused as the service's state of an object
// refuses it: INVALID_OR_MISSING_PARM, 500.
func (s *Service) state(w http.ResponseWriter, r *http.Request, seg []string) {
	respForm := r.URL.Query().Get("t")
	node, e := s.node(seg[0])
	if e != nil {
		if e.status == "REQUESTED_ITEM_NOT_FOUND" {
			e = fail("INVALID_OR_MISSING_PARM", "JerseyBase", "getObjectState", "Required node not found:%s", seg[0])
		}
		s.answerError(w, respForm, e)
		return
	}
	o := s.lookup(node, seg[1])
	var versions []version
	var localID string
	if o != nil {
		o.mu.Lock()
		versions, localID = o.versions, o.localID
		o.mu.Unlock()
	}
	if len(versions) == 0 {
		s.answerError(w, respForm, fail("REQUESTED_ITEM_NOT_FOUND", "CloudActionAbs", "getVersionMap", "object not found: %s", seg[1]))
		return
	}
	if len(seg) == 3 {
		n, err := strconv.Atoi(seg[2])
		if err != nil || n < 0 || n > len(versions) {
			s.answerError(w, respForm, fail("REQUESTED_ITEM_NOT_FOUND", "StoreMapStates", "getVersionState", "versionID not found:%s", seg[2]))
			return
		}
		if n == 0 {
			n = len(versions)
		}
		s.write(w, respForm, http.StatusOK, versionState{node: node, id: seg[1], v: versions[n-1]}.state(s.URL))
		return
	}
	cur := versions[len(versions)-1]
	var size, actualSize int64
	var actual int64
	for _, v := range versions {
		for _, f := range v.files {
			if f.stored == v.number {
				actual++
				actualSize += int64(len(f.data))
			}
		}
	}
	for _, f := range cur.files {
		size += int64(len(f.data))
	}
	var states []string
	for _, v := range versions {
		states = append(states, fmt.Sprintf("%s/state/%d/%s/%d", s.URL, node, enc(seg[1]), v.number))
	}
	s.write(w, respForm, http.StatusOK, stateDoc{root: "objectState", prefix: "obj", ns: "http://uc3.cdlib.org/ontology/mrt/store/object", elems: []elem{
		{name: "identifier", value: seg[1]},
		{name: "numFiles", value: int64(len(cur.files))},
		{name: "size", value: size},
		{name: "numVersions", value: int64(len(versions))},
		{name: "totalActualSize", value: actualSize},
		{name: "numActualFiles", value: actual},
		{name: "object", value: fmt.Sprintf("%s/content/%d/%s", s.URL, node, enc(seg[1]))},
		{name: "versionState", list: "versionStates", value: states},
		{name: "currentVersionState", value: states[len(states)-1]},
		{name: "nodeID", value: int64(node)},
		{name: "lastAddVersion", value: cur.created.Format(time.RFC3339)},
		{name: "localID", value: localID},
	}})
}

// manifest answers with the object's manifest of every version.
func (s *Service) manifest(w http.ResponseWriter, nodeS, id string) {
	node, e := s.node(nodeS)
	if e != nil {
		s.answerError(w, "xml", e)
		return
	}
	o := s.lookup(node, id)
	var versions []version
	if o != nil {
		o.mu.Lock()
		versions = o.versions
		o.mu.Unlock()
	}
	if len(versions) == 0 {
		s.answerError(w, "xml", fail("REQUESTED_ITEM_NOT_FOUND", "CloudActionAbs", "getVersionMap", "object not found: %s", id))
		return
	}
	var b strings.Builder
	x := xmlEscape
	cur := versions[len(versions)-1]
	var total, actualSize int64
	var actual int
	for _, f := range cur.files {
		total += int64(len(f.data))
	}
	for _, v := range versions {
		for _, f := range v.files {
			if f.stored == v.number {
				actual++
				actualSize += int64(len(f.data))
			}
		}
	}
	b.WriteString("<?xml version=\"1.1\"?>\n<objectInfo xmlns=\"http://uc3.cdlib.org/ontology/mrt/manifest\">\n")
	fmt.Fprintf(&b, "  <object id=\"%s\">\n", x(id))
	fmt.Fprintf(&b, "    <current>%d</current>\n    <fileCount>%d</fileCount>\n    <totalSize>%d</totalSize>\n", len(versions), len(cur.files), total)
	fmt.Fprintf(&b, "    <actualCount>%d</actualCount>\n    <actualSize>%d</actualSize>\n    <versionCount>%d</versionCount>\n", actual, actualSize, len(versions))
	fmt.Fprintf(&b, "    <lastAddVersion>%s</lastAddVersion>\n  </object>\n  <versions>\n", cur.created.Format(time.RFC3339))
	for _, v := range versions {
		var size int64
		for _, f := range v.files {
			size += int64(len(f.data))
		}
		fmt.Fprintf(&b, "    <version id=\"%d\">\n      <manifest count=\"%d\" size=\"%d\" created=\"%s\">\n", v.number, len(v.files), size, v.created.Format(time.RFC3339))
		for _, f := range v.files {
			fmt.Fprintf(&b, "        <file id=\"%s\">\n", x(f.name))
			fmt.Fprintf(&b, "          <digestType>SHA-256</digestType>\n          <digest>%s</digest>\n          <size>%d</size>\n", f.sha256, len(f.data))
			fmt.Fprintf(&b, "          <creationDate>%s</creationDate>\n", v.created.Format(time.RFC3339))
			if f.mimeType != "" {
				fmt.Fprintf(&b, "          <mimeType>%s</mimeType>\n", x(f.mimeType))
			}
			fmt.Fprintf(&b, "          <key>%s</key>\n        </file>\n", x(fmt.Sprintf("%s|%d|%s", id, f.stored, f.name)))
		}
		b.WriteString("      </manifest>\n    </version>\n")
	}
	b.WriteString("  </versions>\n</objectInfo>\n")
	w.Header().Set("Content-Type", "text/xml")
	w.Header().Set("Content-Disposition", "attachment; filename="+enc(id)+"--manifest.xml")
	io.WriteString(w, b.String())
}

// content answers with one stored file.
func (s *Service) content(w http.ResponseWriter, seg []string) {
	node, e := s.node(seg[0])
	if e != nil {
		s.answerError(w, "xml", e)
		return
	}
	o := s.lookup(node, seg[1])
	n, err := strconv.Atoi(seg[2])
	if o == nil || err != nil {
		s.answerError(w, "xml", fail("REQUESTED_ITEM_NOT_FOUND", "CloudActionAbs", "getVersionMap", "not found: %s version %s", seg[1], seg[2]))
		return
	}
	o.mu.Lock()
	versions := o.versions
	o.mu.Unlock()
	if n < 1 || n > len(versions) {
		s.answerError(w, "xml", fail("REQUESTED_ITEM_NOT_FOUND", "ContentFile", "getContent", "version not found: %d", n))
		return
	}
	for _, f := range versions[n-1].files {
		if f.name == seg[3] {
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Write(f.data)
			return
		}
	}
	s.answerError(w, "xml", fail("REQUESTED_ITEM_NOT_FOUND", "ContentFile", "getContent", "file not found: %s", seg[3]))
}

func xmlEscape(s string) string {
	var b bytes.Buffer
	for _, r := range s {
		switch r {
		case '&':
			b.WriteString("&amp;")
		case '<':
			b.WriteString("&lt;")
		case '>':
			b.WriteString("&gt;")
		case '"':
			b.WriteString("&quot;")
		case '\'':
			b.WriteString("&apos;")
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// write formats a state document: XML as the service writes it; JSON as
// its JSON formatter turns that XML into JSON; ANVL as name: value lines.
// JSON keys come in the document's order.
func (s *Service) write(w http.ResponseWriter, respForm string, code int, d stateDoc) {
	var b bytes.Buffer
	ctype := "text/xml"
	switch strings.ToLower(respForm) {
	case "json":
		ctype = "application/json"
		key := func(k string) { kb, _ := json.Marshal(k); b.Write(kb); b.WriteByte(':') }
		val := func(v any) { vb, _ := json.Marshal(jsonValue(v)); b.Write(vb) }
		b.WriteByte('{')
		key(d.prefix + ":" + d.root)
		b.WriteByte('{')
		key("xmlns:" + d.prefix)
		val(d.ns)
		for _, e := range d.elems {
			if e.list != "" {
				vals := e.value.([]string)
				if len(vals) == 0 {
					continue
				}
				b.WriteByte(',')
				key(d.prefix + ":" + e.list)
				b.WriteByte('{')
				key(d.prefix + ":" + e.name)
				if len(vals) == 1 {
					val(vals[0])
				} else {
					vb, _ := json.Marshal(vals)
					b.Write(vb)
				}
				b.WriteByte('}')
				continue
			}
			b.WriteByte(',')
			key(d.prefix + ":" + e.name)
			val(e.value)
		}
		b.WriteString("}}")
	case "anvl":
		ctype = "text/x-anvl"
		for _, e := range d.elems {
			if e.list != "" {
				for _, v := range e.value.([]string) {
					fmt.Fprintf(&b, "%s: %s\n", e.name, v)
				}
				continue
			}
			fmt.Fprintf(&b, "%s: %v\n", e.name, e.value)
		}
	default:
		b.WriteString("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n")
		fmt.Fprintf(&b, "<%s:%s xmlns:%s='%s'>", d.prefix, d.root, d.prefix, d.ns)
		for _, e := range d.elems {
			if e.list != "" {
				vals := e.value.([]string)
				if len(vals) == 0 {
					continue
				}
				fmt.Fprintf(&b, "\n  <%s:%s>", d.prefix, e.list)
				for _, v := range vals {
					fmt.Fprintf(&b, "\n    <%s:%s>%s</%s:%s>", d.prefix, e.name, xmlEscape(v), d.prefix, e.name)
				}
				fmt.Fprintf(&b, "\n  </%s:%s>", d.prefix, e.list)
				continue
			}
			fmt.Fprintf(&b, "\n  <%s:%s>%s</%s:%s>", d.prefix, e.name, xmlEscape(fmt.Sprint(e.value)), d.prefix, e.name)
		}
		fmt.Fprintf(&b, "\n</%s:%s>\n", d.prefix, d.root)
	}
	w.Header().Set("Content-Type", ctype)
	w.WriteHeader(code)
	w.Write(b.Bytes())
}

// jsonValue is a value as the service's XML-to-JSON conversion gives it:
// text that reads as a number or a boolean becomes one.
func jsonValue(v any) any {
	s, ok := v.(string)
	if !ok {
		return v
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil && strconv.FormatInt(n, 10) == s {
		return n
	}
	if s == "true" || s == "false" {
		return s == "true"
	}
	return s
}
