// Command gen records what Kubernetes' own Go functions return for seeded, generated pods and
// nodes, for tests/test_kubernetes_helpers.py to compare kpe's helpers with. See ../README.md.
//
//	go run ./gen > cases.json
package main

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"sort"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"
	resourcehelper "k8s.io/component-helpers/resource"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
	podutil "k8s.io/kubernetes/pkg/api/pod"
	core "k8s.io/kubernetes/pkg/apis/core"
	k8sv1 "k8s.io/kubernetes/pkg/apis/core/v1"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/noderesources"
)

const seed = 27

var r = rand.New(rand.NewSource(seed))

func pick[T any](xs []T) T { return xs[r.Intn(len(xs))] }

var cpus = []string{"1n", "1u", "1m", "100m", "250m", "1500m", "0.3", "1", "2", "3.5", "1001n"}
var mems = []string{"1", "1.5", "1000m", "100Mi", "0.3Gi", "0.7Gi", "0.9Gi", "1Gi", "1G", "1.1Ki", "512Mi", "123456789n"}
var gpus = []string{"1", "2", "0.5", "1500m"}

func resources(rl v1.ResourceList, names ...string) {
	for _, n := range names {
		if r.Intn(2) == 0 {
			continue
		}
		switch n {
		case "cpu":
			rl[v1.ResourceCPU] = resource.MustParse(pick(cpus))
		case "memory":
			rl[v1.ResourceMemory] = resource.MustParse(pick(mems))
		default:
			rl[v1.ResourceName(n)] = resource.MustParse(pick(gpus))
		}
	}
}

func container(name string) v1.Container {
	c := v1.Container{Name: name, Image: "x"}
	c.Resources.Requests = v1.ResourceList{}
	c.Resources.Limits = v1.ResourceList{}
	resources(c.Resources.Requests, "cpu", "memory")
	resources(c.Resources.Limits, "cpu", "memory", "nvidia.com/gpu")
	for n, q := range c.Resources.Limits { // valid pods: a request is at most its limit
		if req, ok := c.Resources.Requests[n]; ok && req.Cmp(q) > 0 {
			c.Resources.Limits[n] = req.DeepCopy()
		}
	}
	return c
}

var labelKeys = []string{"zone", "team", "gpu", "kubernetes.io/arch", "pool"}
var labelValues = []string{"a", "b", "c", "4", "8", "amd64"}

func genPod(i int, node string) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", i), Namespace: "ns", UID: types.UID(fmt.Sprint("u", i))}}
	p.Spec.NodeName = node
	for j := 0; j <= r.Intn(3); j++ {
		p.Spec.Containers = append(p.Spec.Containers, container(fmt.Sprintf("c%d", j)))
	}
	for j := 0; j < r.Intn(3); j++ {
		c := container(fmt.Sprintf("i%d", j))
		if r.Intn(2) == 0 {
			always := v1.ContainerRestartPolicyAlways
			c.RestartPolicy = &always
		}
		p.Spec.InitContainers = append(p.Spec.InitContainers, c)
	}
	if r.Intn(4) == 0 {
		p.Spec.Overhead = v1.ResourceList{}
		resources(p.Spec.Overhead, "cpu", "memory")
	}
	if r.Intn(3) == 0 {
		p.Spec.NodeSelector = map[string]string{pick(labelKeys): pick(labelValues)}
	}
	if r.Intn(2) == 0 {
		var terms []v1.NodeSelectorTerm
		for t := 0; t <= r.Intn(2); t++ {
			var term v1.NodeSelectorTerm
			for e := 0; e <= r.Intn(2); e++ {
				op := pick([]v1.NodeSelectorOperator{"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})
				req := v1.NodeSelectorRequirement{Key: pick(labelKeys), Operator: op}
				switch op {
				case "In", "NotIn":
					req.Values = []string{pick(labelValues), pick(labelValues)}
				case "Gt", "Lt":
					req.Values = []string{pick([]string{"3", "5", "7"})}
				}
				term.MatchExpressions = append(term.MatchExpressions, req)
			}
			if r.Intn(3) == 0 {
				term.MatchFields = []v1.NodeSelectorRequirement{{Key: "metadata.name", Operator: pick([]v1.NodeSelectorOperator{"In", "NotIn"}), Values: []string{fmt.Sprintf("n%d", r.Intn(4))}}}
			}
			terms = append(terms, term)
		}
		p.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &v1.NodeSelector{NodeSelectorTerms: terms}}}
	}
	for t := 0; t < r.Intn(3); t++ {
		tol := v1.Toleration{Key: pick([]string{"", "gpu", "dedicated"}), Operator: pick([]v1.TolerationOperator{"Exists", "Equal", ""}), Effect: pick([]v1.TaintEffect{"", "NoSchedule", "NoExecute"})}
		if tol.Operator != "Exists" {
			if tol.Key == "" {
				tol.Key = "gpu"
			}
			tol.Value = pick([]string{"", "a", "b"})
		}
		p.Spec.Tolerations = append(p.Spec.Tolerations, tol)
	}
	k8sv1.SetObjectDefaults_Pod(p) // what the API server stores: limits as requests, rounding to milli-units
	if r.Intn(3) == 0 {
		podLevel(p)
	}
	if node != "" && r.Intn(2) == 0 {
		resized(p)
	}
	return roundTrip(p)
}

// roundTrip gives the pod as a client of the API server decodes it: an empty list is absent
// (omitempty; Go's nil, where an empty map built here would not be), and every quantity parsed
// from its string, so none shares an inf.Dec with another (PodRequests adds overhead in place
// to the pod-level quantity it applies: a shared one would change the pod written out).
func roundTrip(p *v1.Pod) *v1.Pod {
	data, err := json.Marshal(p)
	if err != nil {
		panic(err)
	}
	out := &v1.Pod{}
	if err := json.Unmarshal(data, out); err != nil {
		panic(err)
	}
	return out
}

// podLevel gives the pod valid pod-level resources (spec.resources, ValidatePodSpec's
// validatePodResourceConsistency: requests at least the containers' aggregate, limits at least
// each regular container's limit and at least the pod-level request), then the defaulting the API
// server applies on create (podutil.DefaultPodLevelResources, PrepareForCreate in 1.37).
func podLevel(p *v1.Pod) {
	agg := resourcehelper.AggregateContainerRequests(p, resourcehelper.PodResourcesOptions{})
	p.Spec.Resources = &v1.ResourceRequirements{Requests: v1.ResourceList{}, Limits: v1.ResourceList{}}
	for _, n := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
		extras := cpus
		if n == v1.ResourceMemory {
			extras = mems
		}
		mode := r.Intn(4) // 0: none, 1: request, 2: limit, 3: both
		req := agg[n].DeepCopy()
		if r.Intn(3) != 0 {
			req.Add(resource.MustParse(pick(extras)))
		}
		if mode == 1 || mode == 3 {
			p.Spec.Resources.Requests[n] = req
		}
		if mode == 2 || mode == 3 {
			lim := req.DeepCopy()
			for _, c := range p.Spec.Containers {
				if q, ok := c.Resources.Limits[n]; ok && q.Cmp(lim) > 0 {
					lim = q.DeepCopy()
				}
			}
			if r.Intn(2) == 0 {
				lim.Add(resource.MustParse(pick(extras)))
			}
			p.Spec.Resources.Limits[n] = lim
		}
	}
	internal := &core.Pod{}
	if err := k8sv1.Convert_v1_Pod_To_core_Pod(p, internal, nil); err != nil {
		panic(err)
	}
	podutil.DefaultPodLevelResources(internal)
	if err := k8sv1.Convert_core_Pod_To_v1_Pod(internal, p, nil); err != nil {
		panic(err)
	}
	k8sv1.SetObjectDefaults_Pod(p)
}

// resized gives a running pod the status of an in-place resize (KEP-1287, GA 1.35; pod-level,
// KEP-5419): what the kubelet allocated and actuated per container and for the pod, differing
// from the spec, and sometimes a pending resize (Deferred, Infeasible) or one in progress.
func resized(p *v1.Pod) {
	p.Status.Phase = v1.PodRunning
	status := func(c v1.Container) v1.ContainerStatus {
		cs := v1.ContainerStatus{Name: c.Name}
		if r.Intn(3) != 0 {
			cs.AllocatedResources = v1.ResourceList{}
			resources(cs.AllocatedResources, "cpu", "memory")
		}
		if r.Intn(2) == 0 {
			cs.Resources = &v1.ResourceRequirements{}
			if r.Intn(4) != 0 {
				cs.Resources.Requests = v1.ResourceList{}
				resources(cs.Resources.Requests, "cpu", "memory")
			}
		}
		return cs
	}
	for _, c := range p.Spec.Containers {
		if r.Intn(4) != 0 {
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, status(c))
		}
	}
	for _, c := range p.Spec.InitContainers {
		if r.Intn(3) == 0 {
			p.Status.InitContainerStatuses = append(p.Status.InitContainerStatuses, status(c))
		}
	}
	if r.Intn(3) == 0 {
		if r.Intn(4) != 0 {
			p.Status.AllocatedResources = v1.ResourceList{}
			resources(p.Status.AllocatedResources, "cpu", "memory")
		}
		p.Status.Resources = &v1.ResourceRequirements{}
		if r.Intn(4) != 0 {
			p.Status.Resources.Requests = v1.ResourceList{}
			resources(p.Status.Resources.Requests, "cpu", "memory")
		}
	}
	switch r.Intn(5) {
	case 0:
		p.Status.Conditions = append(p.Status.Conditions, v1.PodCondition{Type: v1.PodResizePending, Status: v1.ConditionTrue, Reason: v1.PodReasonInfeasible})
	case 1:
		p.Status.Conditions = append(p.Status.Conditions, v1.PodCondition{Type: v1.PodResizePending, Status: v1.ConditionTrue, Reason: v1.PodReasonDeferred})
	case 2:
		p.Status.Conditions = append(p.Status.Conditions, v1.PodCondition{Type: v1.PodResizeInProgress, Status: v1.ConditionTrue})
		p.Status.Resize = v1.PodResizeStatusInProgress // deprecated, still written by old kubelets; read by nothing
	}
	k8sv1.SetObjectDefaults_Pod(p)
}

func genNode(i int) *v1.Node {
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("n%d", i), Labels: map[string]string{}}}
	for _, k := range labelKeys {
		if r.Intn(2) == 0 {
			n.Labels[k] = pick(labelValues)
		}
	}
	n.Status.Allocatable = v1.ResourceList{
		v1.ResourceCPU:    resource.MustParse(pick([]string{"1", "2", "4", "3500m"})),
		v1.ResourceMemory: resource.MustParse(pick([]string{"1Gi", "2Gi", "1.5Gi", "4G"})),
	}
	if r.Intn(4) != 0 {
		n.Status.Allocatable[v1.ResourcePods] = resource.MustParse(pick([]string{"1", "2", "110"}))
	}
	if r.Intn(2) == 0 {
		n.Status.Allocatable["nvidia.com/gpu"] = resource.MustParse(pick([]string{"1", "2", "8"}))
	}
	for t := 0; t < r.Intn(3); t++ {
		n.Spec.Taints = append(n.Spec.Taints, v1.Taint{Key: pick([]string{"gpu", "dedicated"}), Value: pick([]string{"", "a", "b"}), Effect: pick([]v1.TaintEffect{"NoSchedule", "NoExecute", "PreferNoSchedule"})})
	}
	k8sv1.SetObjectDefaults_Node(n)
	return n
}

func strs(rl v1.ResourceList) map[string]string {
	out := map[string]string{}
	for n, q := range rl {
		out[string(n)] = q.String()
	}
	return out
}

type nodeCase struct {
	Node        *v1.Node         `json:"node"`
	Pods        []*v1.Pod        `json:"pods"`
	Requested   map[string]int64 `json:"requested"` // NodeInfo.Requested: MilliCPU, Memory, scalar resources
	Pod         *v1.Pod          `json:"pod"`
	Fits        []string         `json:"fits"` // noderesources.Fits reasons
	Affinity    bool             `json:"affinity"`
	Untolerated *string          `json:"untolerated"` // first untolerated NoSchedule/NoExecute taint key
}

func main() {
	logger := klog.Background()
	out := map[string]any{"kubernetes": "v1.37.2", "seed": seed}
	// The options the 1.37 scheduler counts a pod with (framework.PodInfo.CalculateResource, by its
	// default feature gates, recorded below): a running pod's status counts (in-place resize).
	gates := map[string]bool{}
	for _, f := range []string{string(features.PodLevelResources), string(features.InPlacePodVerticalScaling), string(features.InPlacePodLevelResourcesVerticalScaling), string(features.DRANodeAllocatableResources), string(features.PodLevelResourcesFixDefaulting)} {
		gates[f] = utilfeature.DefaultFeatureGate.Enabled(featuregate.Feature(f))
	}
	out["featureGates"] = gates
	opts := resourcehelper.PodResourcesOptions{
		UseStatusResources: gates[string(features.InPlacePodVerticalScaling)],
		InPlacePodLevelResourcesVerticalScalingEnabled: gates[string(features.InPlacePodLevelResourcesVerticalScaling)],
		SkipPodLevelResources:                          !gates[string(features.PodLevelResources)],
	}
	var requests []map[string]any
	for i := 0; i < 400; i++ {
		node := ""
		if i%2 == 1 {
			node = "n0" // a running pod: its status may show a resize
		}
		p := genPod(i, node)
		requests = append(requests, map[string]any{"pod": p, "requests": strs(resourcehelper.PodRequests(p.DeepCopy(), opts))})
	}
	out["podRequests"] = requests
	var nodes []nodeCase
	for i := 0; i < 300; i++ {
		node := genNode(r.Intn(4))
		var pods []*v1.Pod
		for j := 0; j < r.Intn(3); j++ {
			pods = append(pods, genPod(1000+10*i+j, node.Name))
		}
		var copies []*v1.Pod // the helpers may change a pod they are given (roundTrip says how)
		for _, p := range pods {
			copies = append(copies, p.DeepCopy())
		}
		ni := framework.NewNodeInfo(copies...)
		ni.SetNode(node)
		req := map[string]int64{"cpu": ni.Requested.MilliCPU, "memory": ni.Requested.Memory}
		for n, v := range ni.Requested.ScalarResources {
			req[string(n)] = v
		}
		pod := genPod(5000+i, "")
		var reasons []string
		for _, ins := range noderesources.Fits(pod.DeepCopy(), ni, nil, noderesources.ResourceRequestsOptions{EnablePodLevelResources: true}) {
			reasons = append(reasons, ins.Reason)
		}
		sort.Strings(reasons)
		match, _ := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node)
		c := nodeCase{Node: node, Pods: pods, Requested: req, Pod: pod, Fits: reasons, Affinity: match}
		if taint, found := corev1helpers.FindMatchingUntoleratedTaint(logger, node.Spec.Taints, pod.Spec.Tolerations, func(t *v1.Taint) bool {
			return t.Effect == v1.TaintEffectNoSchedule || t.Effect == v1.TaintEffectNoExecute
		}, false); found {
			c.Untolerated = &taint.Key
		}
		nodes = append(nodes, c)
	}
	out["nodes"] = nodes
	var selectors []map[string]any
	keys := []string{"team", "team name", "a/b/c", "example.com/x", "Example.com/x", "-x", "x-", "", "kubernetes.io/arch"}
	values := []string{"a", "", "not valid!", "-a", "a_b.c", "x y"}
	for _, k := range keys {
		for _, v := range values {
			for _, op := range []metav1.LabelSelectorOperator{"In", "Exists", "Near"} {
				sel := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: k, Operator: op, Values: []string{v}}}}
				if op == "Exists" {
					sel.MatchExpressions[0].Values = nil
					sel.MatchLabels = map[string]string{k: v}
				}
				errs := metav1validation.ValidateLabelSelector(sel, metav1validation.LabelSelectorValidationOptions{}, field.NewPath("podSelector"))
				selectors = append(selectors, map[string]any{"selector": sel, "valid": len(errs) == 0})
			}
		}
	}
	out["labelSelectors"] = selectors
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", " ")
	if err := enc.Encode(out); err != nil {
		panic(err)
	}
}
