package rotation

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TrustConsumer verifies with some CAs' bundles and reports what it holds.
type TrustConsumer struct {
	metav1.TypeMeta
	metav1.ObjectMeta

	Spec   TrustConsumerSpec
	Status TrustConsumerStatus
}

// TrustConsumerSpec names the CAs a consumer verifies with.
type TrustConsumerSpec struct {
	CertificateAuthorities []string
	Reporter               string
}

// TrustConsumerStatus is what a consumer last reported.
type TrustConsumerStatus struct {
	Holds []TrustHeld
}

// TrustHeld is which certificates of one CA a consumer holds.
type TrustHeld struct {
	CertificateAuthority string
	Fingerprints         []string
	ReportTime           *metav1.Time
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TrustConsumerList is a list of TrustConsumers.
type TrustConsumerList struct {
	metav1.TypeMeta
	metav1.ListMeta

	Items []TrustConsumer
}
