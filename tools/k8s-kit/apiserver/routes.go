package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"
)

// coreRoutes adds what kube-apiserver serves and the standalone apiextensions server does not:
//   - GET /api: the legacy core group has version v1;
//   - /api/v1/...: the same request on /apis//v1/..., the path of CRDs in the core group "";
//   - GET /apis: every group that has a CRD (upstream leaves this list to kube-apiserver).
func coreRoutes(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path := r.URL.Path
		switch {
		case path == "/api" || path == "/api/":
			writeJSON(w, http.StatusOK, &metav1.APIVersions{
				TypeMeta: metav1.TypeMeta{Kind: "APIVersions"},
				Versions: []string{"v1"},
				ServerAddressByClientCIDRs: []metav1.ServerAddressByClientCIDR{
					{ClientCIDR: "0.0.0.0/0", ServerAddress: "127.0.0.1"}},
			})
		case (path == "/apis" || path == "/apis/") && r.Method == http.MethodGet:
			serveGroupList(next, w, r)
		case strings.HasPrefix(path, "/api/"):
			r.URL.Path = "/apis/" + strings.TrimPrefix(path, "/api") // "/api/v1/x" -> "/apis//v1/x"
			r.URL.RawPath = ""
			next.ServeHTTP(w, r)
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// serveGroupList lists the CRDs through the full handler chain, with the caller's own credentials,
// and answers an APIGroupList: apiextensions.k8s.io first, then the CRD groups by name.
func serveGroupList(next http.Handler, w http.ResponseWriter, r *http.Request) {
	list := r.Clone(r.Context())
	list.URL.Path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
	list.URL.RawQuery = ""
	list.Header.Set("Accept", "application/json")
	rec := httptest.NewRecorder()
	next.ServeHTTP(rec, list)
	if rec.Code != http.StatusOK {
		relay(w, rec)
		return
	}
	var crds apiextensionsv1.CustomResourceDefinitionList
	if err := json.Unmarshal(rec.Body.Bytes(), &crds); err != nil {
		writeStatus(w, http.StatusInternalServerError, metav1.StatusReasonInternalError, "kitapi: reading the CRD list: "+err.Error())
		return
	}
	served := map[string]map[string]bool{} // group -> served versions
	for _, crd := range crds.Items {
		if crd.Spec.Group == "" {
			continue // the core group is listed under /api
		}
		if served[crd.Spec.Group] == nil {
			served[crd.Spec.Group] = map[string]bool{}
		}
		for _, v := range crd.Spec.Versions {
			if v.Served {
				served[crd.Spec.Group][v.Name] = true
			}
		}
	}
	groups := []metav1.APIGroup{discoveryGroup("apiextensions.k8s.io", []string{"v1"})}
	names := make([]string, 0, len(served))
	for g := range served {
		names = append(names, g)
	}
	sort.Strings(names)
	for _, g := range names {
		versions := make([]string, 0, len(served[g]))
		for v := range served[g] {
			versions = append(versions, v)
		}
		if len(versions) == 0 {
			continue
		}
		// Preferred first, by Kubernetes' version order (v2 > v1 > v1beta1 > v1alpha1), as for CRDs upstream.
		sort.Slice(versions, func(i, j int) bool { return version.CompareKubeAwareVersionStrings(versions[i], versions[j]) > 0 })
		groups = append(groups, discoveryGroup(g, versions))
	}
	writeJSON(w, http.StatusOK, &metav1.APIGroupList{
		TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"},
		Groups:   groups,
	})
}

// discoveryGroup describes group with its versions, the first one preferred.
func discoveryGroup(group string, versions []string) metav1.APIGroup {
	g := metav1.APIGroup{Name: group}
	for _, v := range versions {
		g.Versions = append(g.Versions, metav1.GroupVersionForDiscovery{GroupVersion: group + "/" + v, Version: v})
	}
	g.PreferredVersion = g.Versions[0]
	return g
}

// relay copies a recorded response to w.
func relay(w http.ResponseWriter, rec *httptest.ResponseRecorder) {
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

func writeJSON(w http.ResponseWriter, code int, v interface{}) {
	body, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

// writeStatus answers a Kubernetes Status failure, as clients expect from an API server.
func writeStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, msg string) {
	writeJSON(w, code, &metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure,
		Reason:   reason,
		Code:     int32(code),
		Message:  msg,
	})
}
