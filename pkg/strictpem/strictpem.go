// Package strictpem decodes PEM that rekey did not write itself (requests,
// certificates set by signers, CA files on disk) so that every reader of the
// same bytes sees the same blocks.
//
// encoding/pem skips text before a block and, worse, skips a malformed block
// and returns the next well-formed one. Tools such as `openssl req` stop at
// the first block instead, so a request made of a slightly broken benign
// block followed by a second one shows one subject to the person who
// approves it and another to a signer using pem.Decode. Decode accepts only
// a sequence of well-formed blocks with nothing but whitespace around and
// between them, so there is exactly one reading.
package strictpem

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
)

var beginMarker = []byte("-----BEGIN ")

// Decode returns the PEM blocks of data in order. It fails when data holds
// anything but whitespace outside the blocks, when a block is malformed,
// when a block has headers, or when there are more than maxBlocks blocks.
// Empty input (or whitespace only) gives no blocks and no error; callers
// decide whether that is acceptable.
func Decode(data []byte, maxBlocks int) ([]*pem.Block, error) {
	var blocks []*pem.Block
	rest := data
	for i := 0; ; i++ {
		rest = bytes.TrimLeft(rest, " \t\r\n")
		if len(rest) == 0 {
			return blocks, nil
		}
		if !bytes.HasPrefix(rest, beginMarker) {
			if i == 0 {
				return nil, errors.New("must start with a PEM block (\"-----BEGIN ...\"); no other text is allowed")
			}
			return nil, fmt.Errorf("unexpected text after PEM block %d; only whitespace may separate blocks", i-1)
		}
		if i >= maxBlocks {
			return nil, fmt.Errorf("more than %d PEM blocks", maxBlocks)
		}
		block, after := pem.Decode(rest)
		consumed := rest[:len(rest)-len(after)]
		// pem.Decode silently skips a malformed block and decodes the next
		// one: then what it consumed holds more than one BEGIN line.
		if block == nil || bytes.Count(consumed, beginMarker) != 1 {
			return nil, fmt.Errorf("PEM block %d is malformed", i)
		}
		if len(block.Headers) != 0 {
			return nil, fmt.Errorf("PEM block %d must not have headers", i)
		}
		blocks = append(blocks, block)
		rest = after
	}
}

// DecodeOne returns the only block of data, which must be of type
// blockType.
func DecodeOne(data []byte, blockType string) (*pem.Block, error) {
	blocks, err := Decode(data, 1)
	if err != nil {
		if bytes.Count(data, beginMarker) > 1 {
			return nil, fmt.Errorf("must contain exactly one PEM block of type %q and nothing else", blockType)
		}
		return nil, err
	}
	if len(blocks) == 0 {
		return nil, fmt.Errorf("must be a PEM block of type %q (no PEM data found)", blockType)
	}
	if blocks[0].Type != blockType {
		return nil, fmt.Errorf("PEM block type must be %q, got %q", blockType, blocks[0].Type)
	}
	return blocks[0], nil
}

// Certificates decodes one or more CERTIFICATE blocks (at most maxBlocks)
// and parses each: the reading of every certificate chain and bundle rekey
// did not write itself.
func Certificates(data []byte, maxBlocks int) ([]*x509.Certificate, error) {
	blocks, err := Decode(data, maxBlocks)
	if err != nil {
		return nil, err
	}
	if len(blocks) == 0 {
		return nil, errors.New("must contain at least one PEM block of type \"CERTIFICATE\"")
	}
	certs := make([]*x509.Certificate, 0, len(blocks))
	for i, block := range blocks {
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("PEM block %d has type %q, only \"CERTIFICATE\" is allowed", i, block.Type)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("PEM block %d is not a valid X.509 certificate: %v", i, err)
		}
		certs = append(certs, cert)
	}
	return certs, nil
}
