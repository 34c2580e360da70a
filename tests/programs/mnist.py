# ruff: noqa: B007, E501  (PyTorch example code, kept as its authors write it)
"""An MNIST-style CNN in the style of pytorch/examples mnist/main.py, shrunk to 12x12 images:
Conv2d, max_pool2d, Dropout, log_softmax + nll_loss, Adadelta with StepLR, a DataLoader over
a TensorDataset, and the test pass with argmax/eq/sum. PyTorch code: only the imports are
ours."""
import parallel_autograd as torch
import parallel_autograd.nn as nn
import parallel_autograd.nn.functional as F
import parallel_autograd.optim as optim
from parallel_autograd.optim.lr_scheduler import StepLR
from parallel_autograd.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self, p1=0.25, p2=0.5):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, 1)
        self.conv2 = nn.Conv2d(8, 16, 3, 1)
        self.dropout1 = nn.Dropout(p1)
        self.dropout2 = nn.Dropout(p2)
        self.fc1 = nn.Linear(256, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        x = self.conv1(x)
        x = F.relu(x)
        x = self.conv2(x)
        x = F.relu(x)
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.dropout2(x)
        x = self.fc2(x)
        output = F.log_softmax(x, dim=1)
        return output


def train(model, train_loader, optimizer, losses):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())


def test(model, test_loader):
    model.eval()
    test_loss = 0
    correct = 0
    with torch.no_grad():
        for data, target in test_loader:
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction='sum').item()  # sum up batch loss
            pred = output.argmax(dim=1, keepdim=True)  # get the index of the max log-probability
            correct += pred.eq(target.view_as(pred)).sum().item()
    test_loss /= len(test_loader.dataset)
    return test_loss, correct


def make_models(p1=0.25, p2=0.5):
    return {"model": Net(p1, p2)}


def run(models, x, y, epochs=2, batch_size=16, lr=1.0, gamma=0.7):
    """main(): the training losses of every step, then each epoch's test loss."""
    model = models["model"]
    dataset = TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
    train_loader = DataLoader(dataset, batch_size=batch_size, shuffle=False)
    test_loader = DataLoader(dataset, batch_size=2 * batch_size)
    optimizer = optim.Adadelta(model.parameters(), lr=lr)
    scheduler = StepLR(optimizer, step_size=1, gamma=gamma)
    losses, tests = [], []
    for epoch in range(1, epochs + 1):
        train(model, train_loader, optimizer, losses)
        test_loss, correct = test(model, test_loader)
        tests.append(test_loss)
        scheduler.step()
    return losses + tests
