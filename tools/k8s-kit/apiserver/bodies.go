package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"strings"

	jsonpatch "github.com/evanphx/json-patch/v5"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/kubernetes/scheme"
)

func mediaType(r *http.Request) string {
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return mt
}

// replaceBody gives r a new body of the given media type.
func replaceBody(r *http.Request, body []byte, contentType string) {
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	r.Header.Set("Content-Type", contentType)
}

// protobufAsJSON re-encodes protobuf request bodies as JSON. Typed client-go clients (kubectl create
// secret, helm's release storage) send built-in kinds as protobuf, which a CRD cannot decode. The
// apiextensions.k8s.io API itself decodes protobuf and gets the body as sent.
func protobufAsJSON(next http.Handler) http.Handler {
	codec := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if mediaType(r) != runtime.ContentTypeProtobuf || strings.HasPrefix(r.URL.Path, "/apis/apiextensions.k8s.io/") {
			next.ServeHTTP(w, r)
			return
		}
		data, err := io.ReadAll(r.Body)
		_ = r.Body.Close()
		if err == nil && len(data) > 0 {
			data, err = protobufToJSON(codec, data)
		}
		if err != nil {
			writeStatus(w, http.StatusUnsupportedMediaType, metav1.StatusReasonUnsupportedMediaType,
				"kitapi: cannot re-encode this protobuf body as JSON ("+err.Error()+"); send JSON")
			return
		}
		replaceBody(r, data, runtime.ContentTypeJSON)
		next.ServeHTTP(w, r)
	})
}

func protobufToJSON(codec runtime.Decoder, data []byte) ([]byte, error) {
	obj, gvk, err := codec.Decode(data, nil, nil)
	if err != nil {
		return nil, err
	}
	obj.GetObjectKind().SetGroupVersionKind(*gvk) // the JSON must carry apiVersion and kind
	return json.Marshal(obj)
}

// strategicAsMerge serves strategic merge patches on built-in kinds, which CRDs refuse (415): it reads
// the object, applies the patch with the kind's Go type from client-go (as kube-apiserver does) and
// passes the difference on as a JSON merge patch. The merge patch names the resourceVersion it was
// computed from, so a write in between gives 409 Conflict (kube-apiserver would retry instead).
// Kinds unknown to client-go, i.e. real custom resources, keep upstream's 415.
func strategicAsMerge(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		info, ok := request.RequestInfoFrom(r.Context())
		if r.Method != http.MethodPatch || !ok || mediaType(r) != string(types.StrategicMergePatchType) ||
			!scheme.Scheme.IsVersionRegistered(schema.GroupVersion{Group: info.APIGroup, Version: info.APIVersion}) {
			next.ServeHTTP(w, r)
			return
		}
		patch, err := io.ReadAll(r.Body)
		_ = r.Body.Close()
		if err != nil {
			writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "kitapi: reading the patch: "+err.Error())
			return
		}
		current := readCurrent(next, r, info)
		if current.Code != http.StatusOK {
			relay(w, current) // e.g. 404: the patch target does not exist
			return
		}
		merge, code, err := strategicToMerge(current.Body.Bytes(), patch)
		if err != nil {
			reason := map[int]metav1.StatusReason{
				http.StatusUnsupportedMediaType: metav1.StatusReasonUnsupportedMediaType,
				http.StatusUnprocessableEntity:  metav1.StatusReasonInvalid,
			}[code]
			if reason == "" {
				reason = metav1.StatusReasonInternalError
			}
			writeStatus(w, code, reason, "kitapi: strategic merge patch: "+err.Error())
			return
		}
		replaceBody(r, merge, string(types.MergePatchType))
		next.ServeHTTP(w, r)
	})
}

// readCurrent GETs the object (or subresource) that r patches, as the same caller, as JSON.
func readCurrent(next http.Handler, r *http.Request, info *request.RequestInfo) *httptest.ResponseRecorder {
	getInfo := *info
	getInfo.Verb = "get"
	get := r.Clone(request.WithRequestInfo(r.Context(), &getInfo))
	get.Method = http.MethodGet
	get.Body = http.NoBody
	get.ContentLength = 0
	get.URL.RawQuery = ""
	get.Header.Del("Content-Type")
	get.Header.Set("Accept", "application/json")
	rec := httptest.NewRecorder()
	next.ServeHTTP(rec, get)
	return rec
}

// strategicToMerge returns the JSON merge patch that has the effect of the strategic merge patch on
// current, with metadata.resourceVersion set to current's unless the patch sets one itself.
// On failure it also returns the HTTP status to answer.
func strategicToMerge(current, patch []byte) ([]byte, int, error) {
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(current, &head); err != nil {
		return nil, http.StatusInternalServerError, err
	}
	typed, err := scheme.Scheme.New(schema.FromAPIVersionAndKind(head.APIVersion, head.Kind))
	if err != nil {
		return nil, http.StatusUnsupportedMediaType, err
	}
	patched, err := strategicpatch.StrategicMergePatch(current, patch, typed)
	if err != nil {
		return nil, http.StatusUnprocessableEntity, err
	}
	diff, err := jsonpatch.CreateMergePatch(current, patched)
	if err != nil {
		return nil, http.StatusInternalServerError, err
	}
	var merge map[string]interface{}
	if err := json.Unmarshal(diff, &merge); err != nil {
		return nil, http.StatusInternalServerError, err
	}
	if merge == nil {
		return nil, http.StatusInternalServerError, errors.New("merge patch is not a JSON object")
	}
	meta, _ := merge["metadata"].(map[string]interface{})
	if meta == nil {
		meta = map[string]interface{}{}
		merge["metadata"] = meta
	}
	if _, set := meta["resourceVersion"]; !set {
		meta["resourceVersion"] = head.Metadata.ResourceVersion
	}
	out, err := json.Marshal(merge)
	if err != nil {
		return nil, http.StatusInternalServerError, err
	}
	return out, http.StatusOK, nil
}
