// Runs an AOTInductor package from C++, as a serving runtime does: loads it with
// AOTIModelPackageLoader, reads the inputs that tests/torch/test_torch_ops.py saved with
// torch.save, runs the model and saves its outputs the same way.
//   aoti_runner <package.pt2> <inputs file> <outputs file>
#include <fstream>
#include <iostream>
#include <iterator>
#include <vector>

#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/serialize.h>

namespace {

std::vector<char> read_file(const char* path) {
  std::ifstream file(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(file), {});
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: aoti_runner <package.pt2> <inputs file> <outputs file>\n";
    return 2;
  }
  try {
    const c10::IValue saved_inputs = torch::pickle_load(read_file(argv[2]));
    std::vector<at::Tensor> inputs;
    for (const c10::IValue& value : saved_inputs.toListRef()) {
      inputs.push_back(value.toTensor());
    }
    torch::inductor::AOTIModelPackageLoader loader(argv[1]);
    const std::vector<at::Tensor> outputs = loader.run(inputs);
    const std::vector<c10::IValue> saved(outputs.begin(), outputs.end());
    const std::vector<char> bytes = torch::pickle_save(c10::ivalue::Tuple::create(saved));
    std::ofstream(argv[3], std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return 0;
  } catch (const std::exception& error) {
    std::cerr << "aoti_runner: " << error.what() << "\n";
    return 1;
  }
}
