// onnx_check FILE: ONNX's own checker on a model luon exported, then its
// shape inference in strict mode (type checks, node errors thrown), which
// must agree with the shapes the file declares for the graph's outputs.
// Prints "ok" and the node op types in order, or the checker's complaint
// (exit 1); with --dump, then a line per node (op, inputs -> outputs,
// attributes) and per initializer (name, dims, the sum of its float data).
// Built where Debian's libonnx-dev is; run by onnx_spec.lua.
#include <onnx/checker.h>
#include <onnx/shape_inference/implementation.h>

#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>

int main(int argc, char **argv) {
  bool dump = argc == 3 && std::string(argv[1]) == "--dump";
  if (argc != 2 && !dump) {
    std::cerr << "usage: onnx_check [--dump] FILE\n";
    return 2;
  }
  const char *path = argv[argc - 1];
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  onnx::ModelProto model;
  if (!in || !model.ParseFromString(bytes.str())) {
    std::cerr << "onnx_check: " << path << " is not an ONNX model\n";
    return 1;
  }
  try {
    onnx::checker::check_model(model);
    onnx::ShapeInferenceOptions strict(true, 1, true);
    onnx::shape_inference::InferShapes(model, onnx::OpSchemaRegistry::Instance(), strict);
  } catch (const std::exception &e) {
    std::cerr << "onnx_check: " << e.what() << "\n";
    return 1;
  }
  std::cout << "ok";
  for (const auto &n : model.graph().node()) std::cout << " " << n.op_type();
  std::cout << "\n";
  if (!dump) return 0;
  for (const auto &n : model.graph().node()) {
    std::cout << "node " << n.op_type();
    for (const auto &i : n.input()) std::cout << " " << (i.empty() ? "-" : i);
    std::cout << " ->";
    for (const auto &o : n.output()) std::cout << " " << o;
    for (const auto &a : n.attribute()) {
      std::cout << " " << a.name() << "=";
      if (a.type() == onnx::AttributeProto::INT) std::cout << a.i();
      else if (a.type() == onnx::AttributeProto::FLOAT) std::cout << a.f();
      else if (a.type() == onnx::AttributeProto::INTS)
        for (int k = 0; k < a.ints_size(); k++) std::cout << (k ? "," : "") << a.ints(k);
      else std::cout << "?";
    }
    std::cout << "\n";
  }
  for (const auto &t : model.graph().initializer()) {
    std::cout << "init " << t.name() << " " << t.data_type() << " (";
    for (int k = 0; k < t.dims_size(); k++) std::cout << (k ? "," : "") << t.dims(k);
    double sum = 0;
    const std::string &raw = t.raw_data();
    if (t.data_type() == onnx::TensorProto::FLOAT)
      for (size_t k = 0; k + 4 <= raw.size(); k += 4) {
        float v;
        memcpy(&v, raw.data() + k, 4);
        sum += v;
      }
    std::cout << ") " << sum << "\n";
  }
  for (const auto &v : model.graph().input()) std::cout << "input " << v.name() << "\n";
  for (const auto &v : model.graph().output()) std::cout << "output " << v.name() << "\n";
  return 0;
}
